//! Spin-then-park for the threads that hand a staged chunk on (the GPU's copy thread, the
//! completion thread, the engine's completer): `DS4_HANDOFF_SPIN_US` microseconds of polling
//! before a thread blocks on its queue or condition variable.
//!
//! Why: on a virtual machine a parked thread is woken through an inter-processor interrupt to
//! a halted vCPU, which can take hundreds of microseconds; a staged chunk crosses three such
//! hand-offs between its read and its completion (docs/BENCHMARKS.md, "Issue 18", the stage
//! trace). Polling a little first turns a wake-up into a load. Zero (the default) parks at once.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The environment variable: microseconds of polling before a hand-off parks.
pub const HANDOFF_SPIN_ENV: &str = "DS4_HANDOFF_SPIN_US";

/// How long a hand-off polls before it parks (read once per process).
pub(crate) fn spin() -> Duration {
    static SPIN: OnceLock<Duration> = OnceLock::new();
    *SPIN.get_or_init(|| crate::knobs::env_micros(HANDOFF_SPIN_ENV).unwrap_or(Duration::ZERO))
}

/// Polls `ready` until it says true or `limit` has passed; true when it said true.
pub(crate) fn poll_for(limit: Duration, mut ready: impl FnMut() -> bool) -> bool {
    if ready() {
        return true;
    }
    if limit.is_zero() {
        return false;
    }
    let t0 = Instant::now();
    let mut n = 0u32;
    loop {
        if n < 64 {
            std::hint::spin_loop();
            n += 1;
        } else {
            std::thread::yield_now();
        }
        if ready() {
            return true;
        }
        if t0.elapsed() >= limit {
            return false;
        }
    }
}

/// Receives from `rx`, polling it for `spin()` before blocking; `None` once disconnected.
pub(crate) fn recv<T>(rx: &crossbeam_channel::Receiver<T>) -> Option<T> {
    let mut got = None;
    let mut gone = false;
    poll_for(spin(), || match rx.try_recv() {
        Ok(v) => {
            got = Some(v);
            true
        }
        Err(crossbeam_channel::TryRecvError::Empty) => false,
        Err(crossbeam_channel::TryRecvError::Disconnected) => {
            gone = true;
            true
        }
    });
    match (got, gone) {
        (Some(v), _) => Some(v),
        (None, true) => None,
        (None, false) => rx.recv().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_for_stops_on_ready_or_at_the_limit() {
        assert!(poll_for(Duration::ZERO, || true));
        assert!(!poll_for(Duration::ZERO, || false));
        let mut n = 0;
        assert!(poll_for(Duration::from_secs(5), || {
            n += 1;
            n == 100
        }));
        let t0 = Instant::now();
        assert!(!poll_for(Duration::from_millis(20), || false));
        assert!(t0.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn recv_takes_queued_then_reports_disconnection() {
        let (tx, rx) = crossbeam_channel::unbounded();
        tx.send(1).unwrap();
        assert_eq!(recv(&rx), Some(1));
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            tx.send(2).unwrap();
        });
        assert_eq!(recv(&rx), Some(2));
        t.join().unwrap();
        assert_eq!(recv(&rx), None);
    }
}
