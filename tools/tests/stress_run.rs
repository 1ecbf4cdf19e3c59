//! Bounded stress runs through `ds4_tools::stress::run` (the engine of `ds4-stress`): every
//! fault kind surfaces as its own error kind or not at all, never as wrong bytes; the
//! verifier does catch corruption (bit flips must fail the run); nothing is lost; fds and
//! pinned bytes return to their start values. Small op counts keep each test to seconds.
//!
//! The tests take turns (one lock): a run compares the process's open fds before and after,
//! which a test running alongside would disturb.

use ds4_stream::engine::EngineConfig;
use ds4_tools::stress::faults::FaultSpec;
use ds4_tools::stress::report::Report;
use ds4_tools::stress::{run, FileKind, StressConfig};
use std::time::Duration;

const GIB: u64 = 1 << 30;

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run_alone(cfg: &StressConfig) -> Report {
    let _g = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    run(cfg).unwrap()
}

fn base(ops: u64, faults: &str) -> StressConfig {
    StressConfig {
        file: FileKind::Virtual,
        file_len: 6 * GIB + 4093,
        ops: Some(ops),
        duration: None,
        threads: 2,
        tasks: 4,
        engine: EngineConfig {
            workers: 6,
            slots: 6,
            slot_bytes: 1 << 20,
            queue_depth: 16,
            ..EngineConfig::default()
        },
        faults: FaultSpec::parse(faults).unwrap(),
        cancel: 0.1,
        storm_every: Some(Duration::from_millis(300)),
        storm_requests: 300,
        huge_bytes: 0,
        max_inflight_bytes: 1 << 30,
        lost_timeout: Duration::from_secs(60),
        ..StressConfig::default()
    }
}

fn show(r: &Report) -> String {
    format!("{}failures: {:?}", r.text(), r.failures())
}

fn errors(r: &Report, kind: &str) -> u64 {
    r.errors.get(kind).copied().unwrap_or(0)
}

#[test]
fn hidden_faults_never_surface() {
    // Short reads, EINTR storms, latency spikes and slow copies must be invisible: no error
    // but the deliberately bad requests, every byte right.
    let mut cfg = base(600, "short=0.3,eintr=0.2:16,spike=0.01:2ms,slow-copy=50us");
    cfg.storm_every = None;
    cfg.cancel = 0.0;
    let r = run_alone(&cfg);
    assert!(r.passed(), "{}", show(&r));
    assert!(
        r.injected.short_reads > 100 && r.injected.eintr > 100,
        "{}",
        show(&r)
    );
    assert_eq!(
        r.errors.keys().collect::<Vec<_>>(),
        vec!["rejected"],
        "{}",
        show(&r)
    );
    assert_eq!(r.ok + r.rejected_expected, r.ops, "{}", show(&r));
    assert!(r.bytes_verified > 0);
}

#[test]
fn eio_surfaces_as_eio_on_its_own_request() {
    let mut cfg = base(800, "eio=0.02,eio-at=50");
    cfg.storm_every = None;
    cfg.cancel = 0.0;
    let r = run_alone(&cfg);
    assert!(r.passed(), "{}", show(&r));
    assert!(r.eio.injected >= 5, "{}", show(&r));
    assert_eq!(r.eio.injected, r.injected.eio);
    assert!(r.eio.reported >= 1 && r.eio.reported <= r.eio.injected);
    // Without cancellations an unreported EIO can only be a second EIO of a failed request.
    assert_eq!(r.eio.swallowed, 0);
    assert!(errors(&r, "eio") >= 1);
    assert_eq!(r.lost, 0);
}

#[test]
fn everything_at_once_with_cancellations_and_shutdown_storms() {
    let cfg = base(800, "all,eio=0.002");
    let r = run_alone(&cfg);
    assert!(r.passed(), "{}", show(&r));
    assert!(r.storms >= 1, "{}", show(&r));
    assert!(r.storm_requests >= 100);
    assert!(r.cancelled > 0);
    assert_eq!(r.open_failures.injected, r.open_failures.observed);
    assert_eq!((r.lost, r.wrong_bytes), (0, 0));
    assert_eq!(r.resources.pinned_live_after, 0);
    if let (Some(a), Some(b)) = (r.resources.fds_before, r.resources.fds_after) {
        assert!(b <= a, "fds {a} -> {b}");
    }
}

#[test]
fn every_engine_start_with_an_open_failure_is_counted_and_retried() {
    let mut cfg = base(200, "open-fail=1");
    cfg.storm_every = Some(Duration::from_millis(100));
    cfg.storm_requests = 50;
    let r = run_alone(&cfg);
    assert!(r.passed(), "{}", show(&r));
    // Each start fails once on its injected open failure, then starts without one.
    assert!(r.open_failures.injected >= 1);
    assert_eq!(r.open_failures.injected, r.open_failures.observed);
    assert_eq!(
        r.engine_starts,
        2 * r.open_failures.injected,
        "{}",
        show(&r)
    );
}

#[test]
fn bit_flips_are_caught_as_wrong_bytes() {
    // The verifier's self-test: silent corruption must fail the run.
    let mut cfg = base(300, "bitflip=0.2");
    cfg.storm_every = None;
    cfg.cancel = 0.0;
    let r = run_alone(&cfg);
    assert!(r.injected.bit_flips > 0);
    assert!(r.wrong_bytes > 0, "{}", show(&r));
    assert!(!r.passed());
    assert!(r.first_wrong.is_some());
    assert!(r.failures().iter().any(|f| f.contains("wrong bytes")));
}

#[test]
fn sparse_file_with_holes_and_huge_reads() {
    // A real sparse file past 6 GiB: pattern regions around 2 and 4 GiB, holes that must read
    // as zeros, direct IO where the filesystem allows, one multi-GiB read class enabled.
    let mut cfg = base(250, "none");
    cfg.file = FileKind::Sparse {
        path: None,
        keep: false,
    };
    cfg.huge_bytes = (9 * GIB) / 4;
    cfg.max_inflight_bytes = 3 * GIB;
    let r = run_alone(&cfg);
    assert!(r.passed(), "{}", show(&r));
    assert!(r.bytes_verified > GIB / 4, "{}", show(&r));
}

#[test]
fn async_clients_share_a_tight_budget_without_stalling_the_runtime() {
    // Regression: async clients used to block a runtime thread waiting for budget, which
    // could stall the tasks holding it (a 5-minute run hung). 16 tasks, room for ~4 experts.
    let mut cfg = base(400, "slow-copy=100us");
    cfg.threads = 0;
    cfg.tasks = 16;
    cfg.max_inflight_bytes = 32 << 20;
    cfg.storm_every = None;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(run_alone(&cfg));
    });
    let r = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the run stalled: hang");
    assert!(r.passed(), "{}", show(&r));
    assert_eq!(r.ops, 400);
}
