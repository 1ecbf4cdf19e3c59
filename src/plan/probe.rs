//! Measuring the fragmentation headroom on a real device instead of assuming it: the largest
//! single allocation the driver grants next to the free memory it reports (`ds4 plan
//! --measure-headroom`, docs/PLANNER.md). The plan's headroom line is the memory a run must
//! leave unused so that its last large allocation (the KV cache, the expert cache) still
//! succeeds; on a device that can map scattered physical pages into one contiguous range this
//! is small, on one that cannot (the Windows ROCm cliff) it is gigabytes.

use crate::device::{Device, DeviceError};

/// What [`measure_headroom`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HeadroomProbe {
    /// Free device memory the driver reported before the probe.
    pub free: u64,
    /// The largest single allocation that succeeded (a multiple of the step below `free`).
    pub largest: u64,
    /// `free - largest`: what had to stay free for one allocation of everything else.
    pub headroom: u64,
    /// The search's resolution (bytes).
    pub step: u64,
    /// Allocations tried.
    pub attempts: u32,
}

/// Finds the smallest headroom `h` (a multiple of `step`, at most `free / 2`) for which one
/// allocation of `free - h` bytes succeeds: `h = 0`, then doubling until one succeeds, then a
/// binary search between the last failure and the first success. Every successful allocation
/// is freed at once (and zero-filled by the device's `alloc` before that: this takes a few
/// passes over device memory). Fails with the device's error for anything but out-of-memory,
/// and with `OutOfMemory` when not even half of the free memory could be allocated at once.
pub fn measure_headroom(dev: &dyn Device, step: u64) -> Result<HeadroomProbe, DeviceError> {
    let step = step.max(1);
    let free = dev
        .memory_info()?
        .ok_or_else(|| DeviceError::NoDevice {
            backend: dev.kind(),
            detail: "the device does not report its free memory".into(),
        })?
        .free;
    let mut attempts = 0u32;
    let mut fits = |h: u64| -> Result<bool, DeviceError> {
        attempts += 1;
        let len = usize::try_from(free - h).map_err(|_| DeviceError::OutOfRange {
            offset: 0,
            len: free - h,
            size: usize::MAX as u64,
            what: "host address space",
        })?;
        match dev.alloc(len) {
            Ok(b) => {
                drop(b);
                dev.synchronize()?;
                Ok(true)
            }
            Err(DeviceError::OutOfMemory { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    };
    let (mut bad, mut good) = if fits(0)? {
        (None, 0)
    } else {
        let (mut failed, mut h) = (0, step);
        loop {
            if h > free / 2 {
                return Err(DeviceError::OutOfMemory {
                    bytes: free / 2,
                    what: "one allocation of half the free device memory",
                });
            }
            if fits(h)? {
                break (Some(failed), h);
            }
            failed = h;
            h *= 2;
        }
    };
    // Invariant: `bad` failed (or is None when 0 fit), `good` fits; both multiples of step.
    while let Some(b) = bad {
        if good - b <= step {
            break;
        }
        let mid = (b + (good - b) / 2) / step * step;
        if mid <= b {
            break;
        }
        if fits(mid)? {
            good = mid;
        } else {
            bad = Some(mid);
        }
    }
    Ok(HeadroomProbe {
        free,
        largest: free - good,
        headroom: good,
        step,
        attempts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{DeviceBuffer, MemInfo, PinnedBuf, WriteLease};
    use std::sync::{Arc, Mutex};

    /// A device whose allocations succeed up to `limit` bytes and whose free memory is `free`.
    #[derive(Debug)]
    struct Limited {
        free: u64,
        limit: u64,
        tried: Mutex<Vec<u64>>,
    }

    impl Device for Limited {
        fn name(&self) -> String {
            "limited".into()
        }
        fn kind(&self) -> crate::device::BackendKind {
            crate::device::BackendKind::Host
        }
        fn unified_memory(&self) -> bool {
            false
        }
        fn alloc_pinned(&self, _: usize) -> Result<PinnedBuf, DeviceError> {
            unreachable!("the probe allocates device memory only")
        }
        fn alloc(&self, len: usize) -> Result<DeviceBuffer, DeviceError> {
            self.tried.lock().unwrap().push(len as u64);
            if len as u64 > self.limit {
                return Err(DeviceError::OutOfMemory {
                    bytes: len as u64,
                    what: "test",
                });
            }
            DeviceBuffer::host(0)
        }
        fn copy_h2d_leased(
            &self,
            _: &mut PinnedBuf,
            _: usize,
            _: &Arc<WriteLease>,
            _: usize,
            _: usize,
        ) -> Result<(), DeviceError> {
            unreachable!()
        }
        fn read_d2h(&self, _: &DeviceBuffer, _: usize, _: &mut [u8]) -> Result<(), DeviceError> {
            unreachable!()
        }
        fn synchronize(&self) -> Result<(), DeviceError> {
            Ok(())
        }
        fn memory_info(&self) -> Result<Option<MemInfo>, DeviceError> {
            Ok(Some(MemInfo {
                free: self.free,
                total: self.free,
            }))
        }
    }

    fn probe(free: u64, limit: u64, step: u64) -> Result<HeadroomProbe, DeviceError> {
        let d = Limited {
            free,
            limit,
            tried: Mutex::new(Vec::new()),
        };
        measure_headroom(&d, step)
    }

    #[test]
    fn finds_the_smallest_headroom_to_the_step() {
        const MIB: u64 = 1 << 20;
        // Everything fits: no headroom, one attempt.
        let p = probe(1000 * MIB, 1000 * MIB, 2 * MIB).unwrap();
        assert_eq!((p.headroom, p.largest, p.attempts), (0, 1000 * MIB, 1));
        // 37 MiB must stay free: the answer is the next multiple of 2 MiB (38 MiB).
        let p = probe(1000 * MIB, 963 * MIB, 2 * MIB).unwrap();
        assert_eq!(p.headroom, 38 * MIB, "{p:?}");
        assert_eq!(p.largest + p.headroom, p.free);
        // Exactly on a step.
        let p = probe(1000 * MIB, 936 * MIB, 2 * MIB).unwrap();
        assert_eq!(p.headroom, 64 * MIB, "{p:?}");
        // One step.
        let p = probe(1000 * MIB, 998 * MIB, 2 * MIB).unwrap();
        assert_eq!(p.headroom, 2 * MIB, "{p:?}");
    }

    #[test]
    fn gives_up_below_half_of_free_memory() {
        const MIB: u64 = 1 << 20;
        let e = probe(1000 * MIB, 400 * MIB, 2 * MIB).unwrap_err();
        assert!(matches!(e, DeviceError::OutOfMemory { .. }), "{e}");
    }
}
