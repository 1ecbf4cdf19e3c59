//! Foreign memory as request destinations, on every backend: a caller's host memory
//! (`ForeignHostMemory`: every device) and a caller's device allocation wrapped with
//! `Device::wrap_device_memory` (GPU backends; the host backend says it is unsupported). The
//! device case allocates through the device, wraps the same address a second time as if a C
//! program had handed it over, reads into the wrapper, reads the allocation back and compares;
//! dropping the wrapper must not free the allocation (it is read back after the drop).

mod engine_util;

use ds4_stream::device::DeviceError;
use ds4_stream::engine::ReadRequest;
use engine_util::*;
use std::sync::Arc;

#[test]
fn reads_land_in_wrapped_device_memory_and_the_wrapper_frees_nothing() {
    for (name, dev) in devices() {
        let n = 3 * MIB + 123;
        let own = Arc::new(dev.alloc(n).unwrap());
        let Some(addr) = own.memory().device_addr() else {
            // SAFETY: never reached with a bogus address in use: the host backend refuses.
            let r = unsafe { dev.wrap_device_memory(0x1000, 16) };
            assert!(matches!(r, Err(DeviceError::Unsupported { .. })), "{name}");
            continue;
        };
        // SAFETY: `addr` is `own`'s allocation on this device, alive (held by `own`) until
        // after `wrapped` is dropped below, and nothing else touches it meanwhile.
        let wrapped = Arc::new(unsafe { dev.wrap_device_memory(addr, n) }.unwrap());
        assert_eq!(wrapped.memory().device_addr(), Some(addr));
        let e = pattern_engine(64 * MIB as u64, Arc::clone(&dev), cfg(4, MIB));
        let t = e
            .submit(vec![
                ReadRequest::new(4097, n - 200, Arc::clone(&wrapped), 100),
                ReadRequest::new(0, 100, Arc::clone(&wrapped), 0),
            ])
            .unwrap();
        t.wait().unwrap();
        drop(wrapped);
        drop(e);
        assert_pattern(dev.as_ref(), &own, 100, 4097, n - 200);
        assert_pattern(dev.as_ref(), &own, 0, 0, 100);
        // SAFETY: a null address is refused before any use.
        let null = unsafe { dev.wrap_device_memory(0, 1) };
        assert!(null.is_err(), "{name}: null");
        eprintln!("{name}: read into wrapped device memory ok");
    }
}
