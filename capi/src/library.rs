//! The library-level calls: version, default options, status names, error messages.

use crate::error::{call, DS4S_OK, STATUS_NAMES};
use crate::handle::HANDLES;
use crate::{put, Ds4sOptions, ABI_VERSION};
use std::ffi::{c_char, c_int, CStr};
use std::sync::PoisonError;

#[no_mangle]
pub extern "C" fn ds4s_abi_version() -> u32 {
    ABI_VERSION
}

/// # Safety
/// `opts` is NULL or valid for a write of a `ds4s_options`.
#[no_mangle]
pub unsafe extern "C" fn ds4s_options_init(opts: *mut Ds4sOptions) {
    let _ = call(
        "ds4s_options_init",
        |_| {},
        || {
            let v = Ds4sOptions {
                struct_size: std::mem::size_of::<Ds4sOptions>() as u32,
                ..Ds4sOptions::default()
            };
            // SAFETY: the header's contract for `opts`.
            unsafe { put(opts, v, "opts")? };
            Ok(DS4S_OK)
        },
    );
}

#[no_mangle]
pub extern "C" fn ds4s_status_name(status: c_int) -> *const c_char {
    const NAMES: [&CStr; 16] = [
        c"DS4S_OK",
        c"DS4S_PENDING",
        c"DS4S_TIMEOUT",
        c"DS4S_ERR_INVALID_ARGUMENT",
        c"DS4S_ERR_BAD_HANDLE",
        c"DS4S_ERR_IO",
        c"DS4S_ERR_FORMAT",
        c"DS4S_ERR_OUT_OF_RANGE",
        c"DS4S_ERR_UNSUPPORTED",
        c"DS4S_ERR_DEVICE",
        c"DS4S_ERR_CACHE_FULL",
        c"DS4S_ERR_BUSY",
        c"DS4S_ERR_NO_MEMORY",
        c"DS4S_ERR_SHUTDOWN",
        c"DS4S_ERR_NOT_FOUND",
        c"DS4S_ERR_INTERNAL",
    ];
    match STATUS_NAMES.iter().position(|&(s, _)| s == status) {
        Some(i) => NAMES[i].as_ptr(),
        None => c"unknown status".as_ptr(),
    }
}

#[no_mangle]
pub extern "C" fn ds4s_last_error() -> *const c_char {
    crate::error::last_ptr()
}

/// # Safety
/// `buf` is NULL with `cap == 0`, or valid for writes of `cap` bytes.
#[no_mangle]
pub unsafe extern "C" fn ds4s_error_message(h: u64, buf: *mut c_char, cap: usize) -> usize {
    let mut len = 0;
    let _ = call(
        "ds4s_error_message",
        |_| {},
        || {
            let Ok(hd) = HANDLES.get(h) else {
                return Ok(DS4S_OK);
            };
            let msg = hd
                .error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            len = msg.len();
            if cap > 0 && !buf.is_null() {
                let n = len.min(cap - 1);
                // SAFETY: the caller promised `cap` writable bytes at `buf`; we write n + 1 <= cap.
                unsafe {
                    std::ptr::copy_nonoverlapping(msg.as_ptr(), buf.cast::<u8>(), n);
                    *buf.add(n) = 0;
                }
            }
            Ok(DS4S_OK)
        },
    );
    len
}
