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
//! for this thread and for the handle. Structs begin with `struct_size` and are copied with
//! `read_unaligned` / `write_unaligned`, only as many bytes as both sides know.
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

/// A `#[repr(C)]` struct whose first field is `struct_size: u32`.
pub(crate) trait Versioned: Copy {
    fn set_size(&mut self, n: u32);
}

macro_rules! versioned {
    ($($t:ty),*) => {$(
        impl Versioned for $t {
            fn set_size(&mut self, n: u32) {
                self.struct_size = n;
            }
        }
    )*};
}
versioned!(Ds4sOptions, Ds4sLayout, Ds4sTensor, Ds4sStats);

/// The `struct_size` a caller put in its struct at `p`, checked against ours.
///
/// # Safety
/// `p` is NULL or points to at least 4 readable bytes (the header's contract for every struct).
unsafe fn caller_size<T>(p: *const T, what: &str) -> Result<(), Failure> {
    if p.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-null, and the caller promised a struct starting with its u32 size there.
    let size = unsafe { std::ptr::read_unaligned(p.cast::<u32>()) };
    let ours = std::mem::size_of::<T>();
    if (size as usize) < ours {
        return Err(Failure::invalid(format!(
            "{what}->struct_size is {size}, smaller than this ABI's {ours}: set it to sizeof"
        )));
    }
    Ok(())
}

/// Reads a versioned input struct (only the bytes this ABI knows).
///
/// # Safety
/// `p` is NULL or valid for reads of its `struct_size` bytes.
pub(crate) unsafe fn read_in<T: Versioned>(p: *const T, what: &str) -> Result<T, Failure> {
    // SAFETY: forwarded contract.
    unsafe { caller_size(p, what)? };
    // SAFETY: struct_size >= size_of::<T>() was checked, so that many bytes are readable.
    Ok(unsafe { std::ptr::read_unaligned(p) })
}

/// Writes a versioned output struct (only the bytes this ABI knows; struct_size says how many).
///
/// # Safety
/// `p` is NULL or valid for reads and writes of its `struct_size` bytes.
pub(crate) unsafe fn write_out<T: Versioned>(
    p: *mut T,
    mut v: T,
    what: &str,
) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    unsafe { caller_size(p, what)? };
    v.set_size(std::mem::size_of::<T>() as u32);
    // SAFETY: struct_size >= size_of::<T>() was checked, so that many bytes are writable.
    unsafe { std::ptr::write_unaligned(p, v) };
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
