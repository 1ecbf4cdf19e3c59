//! Page-aligned host buffers for unbuffered (O_DIRECT / FILE_FLAG_NO_BUFFERING) reads.
//!
//! The engine's staging memory normally comes from the device backend (pinned memory); this type
//! is the plain host allocation used by the host backend, tests and benches.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

/// A zero-initialised heap buffer whose start is aligned to `align` bytes (a power of two).
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    layout: Layout,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: through `&AlignedBuf` safe code can only read (`Deref` to `&[u8]`) or get a raw
// pointer; like `Vec<u8>`, it holds no interior mutability. Code that writes through the raw
// pointer of a shared AlignedBuf (the host device backend) is unsafe code that must exclude
// readers of those bytes itself (it does so with leases: see ds4-stream's device::buffer).
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len` zeroed bytes aligned to `align`. Returns `None` when `align` is not a
    /// power of two, the size overflows, or the allocator fails (never aborts on a huge `len`).
    pub fn new(len: usize, align: usize) -> Option<Self> {
        let layout = Layout::from_size_align(len.max(1), align).ok()?;
        // SAFETY: layout has non-zero size (len.max(1)).
        let ptr = NonNull::new(unsafe { alloc_zeroed(layout) })?;
        Some(Self { ptr, len, layout })
    }

    /// Like [`Self::new`], and every page has been touched once: the page faults (and the
    /// kernel's page clearing) happen here, not during the first read into the buffer. For
    /// buffers that are reused many times.
    pub fn new_prefaulted(len: usize, align: usize) -> Option<Self> {
        let b = Self::new(len, align)?;
        let step = 4096;
        let mut i = 0;
        while i < len {
            // SAFETY: i < len, inside the allocation; a volatile write of the zero that is
            // already there cannot be optimised away and changes no value.
            unsafe { b.ptr.as_ptr().add(i).write_volatile(0) };
            i += step;
        }
        Some(b)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn align(&self) -> usize {
        self.layout.align()
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised (zeroed) bytes for the life of self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in Deref, and &mut self guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: ptr was allocated with exactly this layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("align", &self.align())
            .finish()
    }
}

/// True when `x` is a multiple of `align` (a power of two).
pub fn is_aligned(x: u64, align: usize) -> bool {
    x & (align as u64 - 1) == 0
}
