//! The reader pool's active limit (`PoolConfig::active`): how many workers take jobs at once,
//! changed while the pool runs, and a close that wakes the workers it holds back.

mod common;

use common::{CountJob, Ledger};
use ds4_io::pattern::PatternSource;
use ds4_io::{Job, PoolConfig, ReadAt, ReaderPool, Source};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn pool(workers: usize, active: Option<usize>) -> ReaderPool {
    let src: Arc<dyn Source> = Arc::new(PatternSource::new(1 << 30, 3));
    ReaderPool::new(
        src,
        &PoolConfig {
            workers,
            queue_depth: 256,
            name: "act".into(),
            active,
        },
    )
    .unwrap()
}

/// What a batch of jobs saw: the most that ran at once, and which worker ran each job.
#[derive(Default)]
struct Seen {
    running: AtomicUsize,
    most: AtomicUsize,
    workers: Mutex<Vec<usize>>,
}

struct Probe {
    seen: Arc<Seen>,
    done: crossbeam_channel::Sender<()>,
    sleep: Duration,
}

impl Job for Probe {
    fn run(self: Box<Self>, h: &mut dyn ReadAt) {
        let now = self.seen.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.seen.most.fetch_max(now, Ordering::SeqCst);
        let name = std::thread::current().name().unwrap_or("").to_string();
        let index: usize = name
            .trim_start_matches("act-")
            .parse()
            .expect("worker name");
        self.seen.workers.lock().unwrap().push(index);
        let mut b = [0u8; 64];
        h.read_exact_at(&mut b, 4096).unwrap();
        std::thread::sleep(self.sleep);
        self.seen.running.fetch_sub(1, Ordering::SeqCst);
        let _ = self.done.send(());
    }
    fn cancel(self: Box<Self>) {
        panic!("no job of these batches is cancelled");
    }
}

/// Runs `n` jobs of `sleep` each on `p` and waits for all of them.
fn batch(p: &ReaderPool, n: usize, sleep: Duration) -> Arc<Seen> {
    let seen = Arc::new(Seen::default());
    let (tx, rx) = crossbeam_channel::unbounded();
    for _ in 0..n {
        p.submit(Box::new(Probe {
            seen: Arc::clone(&seen),
            done: tx.clone(),
            sleep,
        }));
    }
    for _ in 0..n {
        rx.recv_timeout(Duration::from_secs(60))
            .expect("a job never ran");
    }
    seen
}

#[test]
fn the_limit_caps_the_jobs_running_at_once_and_follows_changes() {
    let p = pool(6, Some(2));
    let l = p.active_limit().expect("built with a limit").clone();
    assert_eq!((l.get(), l.workers()), (2, 6));
    let ms = Duration::from_millis(3);

    let s = batch(&p, 40, ms);
    assert_eq!(s.most.load(Ordering::SeqCst), 2, "two active workers");
    assert!(s.workers.lock().unwrap().iter().all(|&w| w < 2));

    assert_eq!(l.set(5), 5);
    let s = batch(&p, 60, ms);
    let most = s.most.load(Ordering::SeqCst);
    assert!((3..=5).contains(&most), "raised to 5: {most} at once");
    assert!(s.workers.lock().unwrap().iter().all(|&w| w < 5));

    // Lowered: workers 1..5 were waiting for a job, so each may still take one, no more.
    assert_eq!(l.set(1), 1);
    let s = batch(&p, 40, ms);
    let w = s.workers.lock().unwrap();
    for i in 1..6 {
        let n = w.iter().filter(|&&x| x == i).count();
        assert!(n <= 1, "worker {i} ran {n} jobs after the limit fell to 1");
    }
    assert!(w.iter().filter(|&&x| x == 0).count() >= 35);
    drop(w);

    // Out of range values are clamped, not refused.
    assert_eq!(l.set(0), 1);
    assert_eq!(l.set(99), 6);
}

#[test]
fn without_a_limit_every_worker_takes_jobs() {
    let p = pool(4, None);
    assert!(p.active_limit().is_none());
    let s = batch(&p, 40, Duration::from_millis(5));
    let most = s.most.load(Ordering::SeqCst);
    assert!(most >= 2, "four workers, no limit: {most} at once");
}

#[test]
fn close_wakes_the_workers_the_limit_holds_and_every_job_ends_once() {
    for round in 0..4 {
        let p = pool(5, Some(1));
        let ledger = Ledger::new(30);
        for id in 0..30 {
            p.submit(Box::new(CountJob {
                id,
                ledger: Arc::clone(&ledger),
                offset: id as u64 * 4096,
                len: 512,
                seed: Some(3),
                sleep: Duration::from_millis(2),
            }));
        }
        std::thread::sleep(Duration::from_millis(round * 3));
        drop(p); // joins: workers 1..5 sit in the limit, and must be woken
        ledger.assert_exactly_once(30);
        let (ran, cancelled) = ledger.totals();
        assert_eq!(ran + cancelled, 30);
        assert!(
            ran < 30 || round > 0,
            "round {round}: all ran before the close"
        );
    }
}
