//! The C ABI of ds4-stream: `libds4stream` (cdylib + staticlib) with the header
//! `include/ds4stream.h`, so the C DS4 engine (or any C/C++ program) can stream a DS4 file
//! through this engine: reads of byte ranges into its own memory, and an expert cache that makes
//! (layer, ids[K]) resident and hands out pinned pointers. docs/C_API.md is the guide.
//!
//! Why a crate of its own: the engine library stays free of `extern "C"` and `unsafe` pointer
//! handling for Rust users; this crate is the only place C pointers are touched, each access
//! under a `// SAFETY:` that names the header's contract it relies on.
//!
//! Rules every exported function follows (see [`error::call`]): no panic crosses the boundary;
//! NULL and bad sizes are `DS4S_ERR_INVALID_ARGUMENT`; handles are registry ids
//! ([`registry`]), so stale or made-up ones are `DS4S_ERR_BAD_HANDLE`; a failure leaves a message
//! for this thread and for the handle. Structs begin with `struct_size` and are copied byte
//! by byte, only as many bytes as both sides know (the extensible-struct rule: `read_in`,
//! `write_out`).
//!
//! Limits: caller device memory must belong to the handle's GPU and context (the primary
//! context); completion is host-side (no event handle).
#![deny(unsafe_op_in_unsafe_fn)]

pub mod error;
mod experts;
mod handle;
mod library;
mod query;
mod read;
pub mod registry;

pub use experts::*;
pub use handle::*;
pub use library::*;
pub use query::*;
pub use read::*;

use error::Failure;
use std::ffi::c_void;

/// The ABI version (`DS4S_ABI_VERSION` in the header).
pub const ABI_VERSION: u32 = 1;

pub const DS4S_BACKEND_AUTO: i32 = 0;
pub const DS4S_BACKEND_HOST: i32 = 1;
pub const DS4S_BACKEND_CUDA: i32 = 2;
pub const DS4S_BACKEND_HIP: i32 = 3;
pub const DS4S_MEM_HOST: i32 = 0;
pub const DS4S_MEM_DEVICE: i32 = 1;
pub const DS4S_GATE: i32 = 0;
pub const DS4S_UP: i32 = 1;
pub const DS4S_DOWN: i32 = 2;
pub const DS4S_OPEN_NO_DIRECT_IO: u32 = 1;
pub const DS4S_OPEN_COLD: u32 = 2;

/// `ds4s_options`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Ds4sOptions {
    pub struct_size: u32,
    pub flags: u32,
    pub workers: u32,
    pub staging_slots: u32,
    pub staging_slot_bytes: u64,
    pub backend: i32,
    pub device_ordinal: i32,
    pub expert_cache_slots: u32,
    pub reserved: u32,
}

/// `ds4s_layout`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Ds4sLayout {
    pub struct_size: u32,
    pub n_layer: u32,
    pub n_expert: u32,
    pub n_expert_used: u32,
    pub n_hash_layer: u32,
    pub gate_type: u32,
    pub up_type: u32,
    pub down_type: u32,
    pub backend: i32,
    pub expert_memory: i32,
    pub expert_cache_slots: u32,
    pub reserved: u32,
    pub n_embd: u64,
    pub expert_ff: u64,
    pub vocab: u64,
    pub file_size: u64,
    pub gate_bytes: u64,
    pub up_bytes: u64,
    pub down_bytes: u64,
    pub expert_bytes: u64,
    pub expert_slot_bytes: u64,
}

/// `ds4s_tensor`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Ds4sTensor {
    pub struct_size: u32,
    pub ggml_type: u32,
    pub n_dims: u32,
    pub reserved: u32,
    pub dims: [u64; 4],
    pub offset: u64,
    pub nbytes: u64,
}

/// `ds4s_range`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Ds4sRange {
    pub file_offset: u64,
    pub len: u64,
    pub dst: *mut c_void,
}

/// `ds4s_expert_ptrs`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Ds4sExpertPtrs {
    pub gate: *mut c_void,
    pub up: *mut c_void,
    pub down: *mut c_void,
    pub gate_bytes: u64,
    pub up_bytes: u64,
    pub down_bytes: u64,
    pub slot: u32,
    pub reserved: u32,
}

/// `ds4s_stats`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Ds4sStats {
    pub struct_size: u32,
    pub reserved: u32,
    pub expert_hits: u64,
    pub expert_dedup_hits: u64,
    pub expert_misses: u64,
    pub expert_evictions: u64,
    pub expert_fills_failed: u64,
    pub expert_bytes_streamed: u64,
    pub expert_loads_in_flight: u64,
    pub expert_pinned_slots: u64,
    pub bytes_read: u64,
    pub requests: u64,
    pub failed_requests: u64,
}

/// A `#[repr(C)]` struct whose first field is `struct_size: u32`, of integer fields only and no
/// padding (capi/tests/header.rs checks the sizes), so any bytes are a valid value of it.
pub(crate) trait Versioned: Copy + Default {
    /// Its C name, for messages.
    const NAME: &'static str;
    fn set_size(&mut self, n: u32);
}

macro_rules! versioned {
    ($($t:ty => $name:literal),*) => {$(
        impl Versioned for $t {
            const NAME: &'static str = $name;
            fn set_size(&mut self, n: u32) {
                self.struct_size = n;
            }
        }
    )*};
}
versioned!(
    Ds4sOptions => "ds4s_options",
    Ds4sLayout => "ds4s_layout",
    Ds4sTensor => "ds4s_tensor",
    Ds4sStats => "ds4s_stats"
);

/// The smallest `struct_size` accepted: the field itself.
pub const STRUCT_SIZE_MIN: u32 = 4;
/// The largest `struct_size` accepted (`DS4S_STRUCT_SIZE_MAX`): far above any struct of this
/// ABI, low enough that an uninitialised size is refused before we touch that much memory.
pub const STRUCT_SIZE_MAX: u32 = 4096;

/// The `struct_size` a caller put in its struct at `p`, checked against the bounds.
///
/// # Safety
/// `p` is NULL or points to at least 4 readable bytes (the header's contract for every struct).
unsafe fn caller_size<T: Versioned>(p: *const T, what: &str) -> Result<usize, Failure> {
    if p.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-null, and the caller promised a struct starting with its u32 size there.
    let size = unsafe { std::ptr::read_unaligned(p.cast::<u32>()) };
    if !(STRUCT_SIZE_MIN..=STRUCT_SIZE_MAX).contains(&size) {
        return Err(Failure::invalid(format!(
            "{what}->struct_size is {size}, outside {STRUCT_SIZE_MIN}..={STRUCT_SIZE_MAX}: set it \
             to sizeof({}) (this library's is {})",
            T::NAME,
            std::mem::size_of::<T>()
        )));
    }
    Ok(size as usize)
}

/// Reads a versioned input struct, the extensible-struct rule: the first
/// min(struct_size, ours) bytes are the caller's, fields past a smaller struct_size are 0 (their
/// default), and bytes past ours (a newer header's fields) must be 0, else the caller asked for
/// something this library does not know.
///
/// # Safety
/// `p` is NULL or valid for reads of its `struct_size` bytes.
pub(crate) unsafe fn read_in<T: Versioned>(p: *const T, what: &str) -> Result<T, Failure> {
    // SAFETY: forwarded contract.
    let size = unsafe { caller_size(p, what)? };
    let ours = std::mem::size_of::<T>();
    let src = p.cast::<u8>();
    if size > ours {
        // SAFETY: the caller promised `size` readable bytes at `p`.
        let tail = unsafe { std::slice::from_raw_parts(src.add(ours), size - ours) };
        if let Some(i) = tail.iter().position(|&b| b != 0) {
            return Err(Failure::invalid(format!(
                "{what}: byte {} of {size} is {:#04x}, past the {ours} bytes of this library's \
                 {}: a field of a newer header set to a non-default value this library does \
                 not know (leave it 0)",
                ours + i,
                tail[i],
                T::NAME
            )));
        }
    }
    let mut v = T::default();
    // SAFETY: min(size, ours) bytes are readable at `p` (the caller's promise) and writable in
    // `v`; T is integers only (Versioned's contract), so any bytes make a valid value.
    unsafe { std::ptr::copy_nonoverlapping(src, (&mut v as *mut T).cast::<u8>(), size.min(ours)) };
    Ok(v)
}

/// Writes a versioned output struct: the first min(struct_size, ours) bytes of `v`, with
/// struct_size left as the caller set it; bytes past ours (a newer header's fields) are zeroed,
/// so they read as "not filled by this library".
///
/// # Safety
/// `p` is NULL or valid for reads and writes of its `struct_size` bytes.
pub(crate) unsafe fn write_out<T: Versioned>(
    p: *mut T,
    mut v: T,
    what: &str,
) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    let size = unsafe { caller_size(p, what)? };
    let ours = std::mem::size_of::<T>();
    v.set_size(size as u32);
    let dst = p.cast::<u8>();
    // SAFETY: the caller promised `size` writable bytes at `p`; we write min(size, ours) from
    // `v` and zero the rest of `size`.
    unsafe {
        std::ptr::copy_nonoverlapping((&v as *const T).cast::<u8>(), dst, size.min(ours));
        if size > ours {
            std::ptr::write_bytes(dst.add(ours), 0, size - ours);
        }
    }
    Ok(())
}

/// Writes a plain out-parameter.
///
/// # Safety
/// `p` is NULL or valid for a write of a `T`.
pub(crate) unsafe fn put<T>(p: *mut T, v: T, what: &str) -> Result<(), Failure> {
    if p.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-null; the caller promised room for a T.
    unsafe { std::ptr::write_unaligned(p, v) };
    Ok(())
}

/// A caller array of `n` `T`s as a slice (`n == 0`: empty, `p` may be NULL).
///
/// # Safety
/// `p` is NULL or valid for reads of `n` `T`s, unchanged while the returned slice is used.
pub(crate) unsafe fn slice_in<'a, T>(
    p: *const T,
    n: usize,
    what: &str,
) -> Result<&'a [T], Failure> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Failure::invalid(format!(
            "{what} is NULL with a count of {n}"
        )));
    }
    if n > isize::MAX as usize / std::mem::size_of::<T>().max(1) {
        return Err(Failure::invalid(format!("{what}: count {n} is too large")));
    }
    if (p as usize) % std::mem::align_of::<T>() != 0 {
        return Err(Failure::invalid(format!("{what} is misaligned")));
    }
    // SAFETY: non-null, aligned, size in range, and the caller promised n readable elements.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}
