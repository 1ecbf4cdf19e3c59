//! Status codes, the mapping from the engine's typed errors onto them, the messages (per thread
//! and per handle), and [`call`]: the wrapper every exported function runs its body in, so that
//! no panic crosses the C boundary and every failure leaves a message.

use ds4_stream::device::DeviceError;
use ds4_stream::engine::EngineError;
use ds4_stream::expert_cache::CacheError;
use ds4_stream::expert_store::StoreError;
use ds4_stream::model::ModelOpenError;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

pub const DS4S_OK: c_int = 0;
pub const DS4S_PENDING: c_int = 1;
pub const DS4S_TIMEOUT: c_int = 2;
pub const DS4S_ERR_INVALID_ARGUMENT: c_int = -1;
pub const DS4S_ERR_BAD_HANDLE: c_int = -2;
pub const DS4S_ERR_IO: c_int = -3;
pub const DS4S_ERR_FORMAT: c_int = -4;
pub const DS4S_ERR_OUT_OF_RANGE: c_int = -5;
pub const DS4S_ERR_UNSUPPORTED: c_int = -6;
pub const DS4S_ERR_DEVICE: c_int = -7;
pub const DS4S_ERR_CACHE_FULL: c_int = -8;
pub const DS4S_ERR_BUSY: c_int = -9;
pub const DS4S_ERR_NO_MEMORY: c_int = -10;
pub const DS4S_ERR_SHUTDOWN: c_int = -11;
pub const DS4S_ERR_NOT_FOUND: c_int = -12;
pub const DS4S_ERR_INTERNAL: c_int = -13;

/// Every status with its name (the header's enum; `tests/header.rs` checks they agree).
pub const STATUS_NAMES: [(c_int, &str); 16] = [
    (DS4S_OK, "DS4S_OK"),
    (DS4S_PENDING, "DS4S_PENDING"),
    (DS4S_TIMEOUT, "DS4S_TIMEOUT"),
    (DS4S_ERR_INVALID_ARGUMENT, "DS4S_ERR_INVALID_ARGUMENT"),
    (DS4S_ERR_BAD_HANDLE, "DS4S_ERR_BAD_HANDLE"),
    (DS4S_ERR_IO, "DS4S_ERR_IO"),
    (DS4S_ERR_FORMAT, "DS4S_ERR_FORMAT"),
    (DS4S_ERR_OUT_OF_RANGE, "DS4S_ERR_OUT_OF_RANGE"),
    (DS4S_ERR_UNSUPPORTED, "DS4S_ERR_UNSUPPORTED"),
    (DS4S_ERR_DEVICE, "DS4S_ERR_DEVICE"),
    (DS4S_ERR_CACHE_FULL, "DS4S_ERR_CACHE_FULL"),
    (DS4S_ERR_BUSY, "DS4S_ERR_BUSY"),
    (DS4S_ERR_NO_MEMORY, "DS4S_ERR_NO_MEMORY"),
    (DS4S_ERR_SHUTDOWN, "DS4S_ERR_SHUTDOWN"),
    (DS4S_ERR_NOT_FOUND, "DS4S_ERR_NOT_FOUND"),
    (DS4S_ERR_INTERNAL, "DS4S_ERR_INTERNAL"),
];

/// A failed call: its status and what to tell the caller.
#[derive(Debug, Clone)]
pub struct Failure {
    pub status: c_int,
    pub message: String,
}

impl Failure {
    pub fn new(status: c_int, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(DS4S_ERR_INVALID_ARGUMENT, message)
    }
}

/// `a: b: c`, the error and its sources (the one printer of the workspace).
pub use ds4_stream::errors::chain;

pub fn device_status(e: &DeviceError) -> c_int {
    match e {
        DeviceError::NotCompiled(_) | DeviceError::Unsupported { .. } => DS4S_ERR_UNSUPPORTED,
        DeviceError::OutOfMemory { .. } => DS4S_ERR_NO_MEMORY,
        DeviceError::Busy { .. } => DS4S_ERR_BUSY,
        DeviceError::OutOfRange { .. } => DS4S_ERR_OUT_OF_RANGE,
        _ => DS4S_ERR_DEVICE,
    }
}

pub fn engine_status(e: &EngineError) -> c_int {
    match e {
        EngineError::Read { .. } | EngineError::Open { .. } | EngineError::Workers { .. } => {
            DS4S_ERR_IO
        }
        EngineError::Device { source, .. } | EngineError::Staging { source, .. } => {
            device_status(source)
        }
        EngineError::OutOfFile { .. } | EngineError::OutOfBuffer { .. } => DS4S_ERR_OUT_OF_RANGE,
        EngineError::DestinationBusy { .. } => DS4S_ERR_BUSY,
        EngineError::OutOfMemory { .. } => DS4S_ERR_NO_MEMORY,
        EngineError::Config(_) => DS4S_ERR_INVALID_ARGUMENT,
        EngineError::Shutdown { .. } => DS4S_ERR_SHUTDOWN,
        _ => DS4S_ERR_INTERNAL,
    }
}

impl From<EngineError> for Failure {
    fn from(e: EngineError) -> Self {
        Failure::new(engine_status(&e), chain(&e))
    }
}

impl From<DeviceError> for Failure {
    fn from(e: DeviceError) -> Self {
        Failure::new(device_status(&e), chain(&e))
    }
}

impl From<ModelOpenError> for Failure {
    fn from(e: ModelOpenError) -> Self {
        let status = match &e {
            ModelOpenError::Read(_) => DS4S_ERR_IO,
            ModelOpenError::Header { .. } | ModelOpenError::Layout { .. } => DS4S_ERR_FORMAT,
        };
        Failure::new(status, chain(&e))
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        let status = match &e {
            StoreError::NoSuchLayer { .. } | StoreError::NoSuchExpert { .. } => {
                DS4S_ERR_OUT_OF_RANGE
            }
            StoreError::Cache(CacheError::Full { .. }) => DS4S_ERR_CACHE_FULL,
            StoreError::Cache(_) => DS4S_ERR_INVALID_ARGUMENT,
            StoreError::Read { source, .. } => engine_status(source),
            StoreError::Alloc { source, .. } => device_status(source),
            StoreError::Layout(_) => DS4S_ERR_FORMAT,
            StoreError::Timeout { .. } => DS4S_TIMEOUT,
        };
        Failure::new(status, chain(&e))
    }
}

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

fn c_string(s: &str) -> CString {
    // Interior NULs cannot be in a C string: show them escaped.
    CString::new(s.replace('\0', "\\0")).unwrap_or_default()
}

/// Stores `msg` as this thread's last error.
pub fn set_last(msg: &str) {
    LAST.with(|l| *l.borrow_mut() = c_string(msg));
}

/// This thread's last error (valid until it is replaced on this thread).
pub fn last_ptr() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

/// Runs an exported function's body: catches panics (DS4S_ERR_INTERNAL), and for a failure
/// stores "`func`: message" as this thread's last error and hands it to `on_error` (the
/// handle's message). DS4S_TIMEOUT and DS4S_PENDING are outcomes, not errors: no message.
pub fn call(
    func: &str,
    on_error: impl FnOnce(&str),
    body: impl FnOnce() -> Result<c_int, Failure>,
) -> c_int {
    let r = catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|p| {
        let what = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err(Failure::new(
            DS4S_ERR_INTERNAL,
            format!("internal error (panic: {what}); please report it"),
        ))
    });
    match r {
        Ok(status) => status,
        Err(f) if f.status > 0 => f.status,
        Err(f) => {
            let msg = format!("{func}: {}", f.message);
            // Reporting must not panic either (a poisoned lock is recovered inside).
            let _ = catch_unwind(AssertUnwindSafe(|| {
                set_last(&msg);
                on_error(&msg);
            }));
            f.status
        }
    }
}
