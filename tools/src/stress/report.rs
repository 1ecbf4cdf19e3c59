//! Counting a stress run ([`Tally`], shared by every client) and its result ([`Report`]): ops,
//! bytes, errors by kind, latency percentiles, `lost`, `wrong_bytes`, the faults injected and
//! the expected-versus-observed fault accounting. [`Report::passed`] is the verdict the binary
//! turns into its exit code.

use super::content::WrongByte;
use super::faults::{EioEntry, ErrorKind};
use hdrhistogram::Histogram;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

const MAX_US: u64 = 3_600_000_000;

/// Counters every client adds to.
pub struct Tally {
    pub ops: AtomicU64,
    pub ok: AtomicU64,
    pub bytes_verified: AtomicU64,
    pub wrong_bytes: AtomicU64,
    pub lost: AtomicU64,
    pub cancelled: AtomicU64,
    pub submitted: AtomicU64,
    pub rejected_expected: AtomicU64,
    pub storms: AtomicU64,
    pub storm_requests: AtomicU64,
    pub storm_max_inflight: AtomicU64,
    pub storm_drop_max_us: AtomicU64,
    pub engine_starts: AtomicU64,
    pub unexpected: AtomicU64,
    errors: Mutex<BTreeMap<ErrorKind, u64>>,
    first_wrong: Mutex<Option<WrongByte>>,
    first_unexpected: Mutex<Option<String>>,
    latency: Mutex<Histogram<u64>>,
    /// (source, op) of every injected EIO some request reported.
    reported_eio: Mutex<Vec<(u32, u64)>>,
    /// (source, offset, end) of requests whose outcome was not an observed success: failed,
    /// cancelled, lost. An injected EIO no request reported must fall into one of these.
    unobserved: Mutex<Vec<(u32, u64, u64)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Default for Tally {
    fn default() -> Self {
        Self::new()
    }
}

impl Tally {
    pub fn new() -> Self {
        let h = Histogram::new_with_bounds(1, MAX_US, 3)
            .unwrap_or_else(|_| unreachable!("constant bounds"));
        Self {
            ops: AtomicU64::new(0),
            ok: AtomicU64::new(0),
            bytes_verified: AtomicU64::new(0),
            wrong_bytes: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            submitted: AtomicU64::new(0),
            rejected_expected: AtomicU64::new(0),
            storms: AtomicU64::new(0),
            storm_requests: AtomicU64::new(0),
            storm_max_inflight: AtomicU64::new(0),
            storm_drop_max_us: AtomicU64::new(0),
            engine_starts: AtomicU64::new(0),
            unexpected: AtomicU64::new(0),
            errors: Mutex::default(),
            first_wrong: Mutex::default(),
            first_unexpected: Mutex::default(),
            latency: Mutex::new(h),
            reported_eio: Mutex::default(),
            unobserved: Mutex::default(),
        }
    }

    pub fn latency(&self, d: Duration) {
        let us = u64::try_from(d.as_micros())
            .unwrap_or(u64::MAX)
            .clamp(1, MAX_US);
        lock(&self.latency).saturating_record(us);
    }

    pub fn error(&self, kind: ErrorKind) {
        *lock(&self.errors).entry(kind).or_insert(0) += 1;
    }

    pub fn wrong(&self, n: u64, first: Option<WrongByte>) {
        if n > 0 {
            self.wrong_bytes.fetch_add(n, Relaxed);
            if let Some(w) = first {
                lock(&self.first_wrong).get_or_insert(w);
            }
        }
    }

    /// Records an error nobody expected (fails the run), keeping the first message.
    pub fn unexpected(&self, what: String) {
        self.unexpected.fetch_add(1, Relaxed);
        lock(&self.first_unexpected).get_or_insert(what);
    }

    pub fn reported_eio(&self, source: u32, op: u64) {
        lock(&self.reported_eio).push((source, op));
    }

    pub fn unobserved(&self, source: u32, ranges: impl Iterator<Item = (u64, u64)>) {
        let mut u = lock(&self.unobserved);
        u.extend(ranges.map(|(o, l)| (source, o, o.saturating_add(l))));
    }

    pub fn max(a: &AtomicU64, v: u64) {
        a.fetch_max(v, Relaxed);
    }

    /// The final report. `injected` are the faults the sources counted, `eio_log` every
    /// injected EIO with its read.
    pub fn report(&self, injected: Injected, eio_log: &[EioEntry], wall: Duration) -> Report {
        let errors = lock(&self.errors).clone();
        let h = lock(&self.latency);
        let reported = lock(&self.reported_eio).clone();
        let unobserved = lock(&self.unobserved).clone();
        // Fault accounting: every EIO a request reported was injected (and reported once), and
        // every injected EIO that no request reported hit a request whose outcome nobody saw
        // succeed (failed first with another chunk's error, cancelled, lost). Anything else
        // would be an injected error that turned into a success: swallowed.
        let injected_ops: HashSet<(u32, u64)> = eio_log.iter().map(|e| (e.source, e.op)).collect();
        let mut seen = HashSet::new();
        let mut not_injected = 0u64;
        let mut reported_twice = 0u64;
        for r in &reported {
            if !injected_ops.contains(r) {
                not_injected += 1;
            }
            if !seen.insert(*r) {
                reported_twice += 1;
            }
        }
        let mut explained = 0u64;
        let mut swallowed = 0u64;
        for e in eio_log {
            if seen.contains(&(e.source, e.op)) {
                continue;
            }
            let end = e.offset.saturating_add(e.len);
            if unobserved
                .iter()
                .any(|&(s, o, x)| s == e.source && o < end && e.offset < x)
            {
                explained += 1;
            } else {
                swallowed += 1;
            }
        }
        let ld = |a: &AtomicU64| a.load(Relaxed);
        Report {
            ops: ld(&self.ops),
            ok: ld(&self.ok),
            bytes_verified: ld(&self.bytes_verified),
            wall_s: wall.as_secs_f64(),
            setup_s: 0.0,
            ops_s: 0.0,
            gib_per_s: ld(&self.bytes_verified) as f64
                / (1u64 << 30) as f64
                / wall.as_secs_f64().max(1e-9),
            lost: ld(&self.lost),
            wrong_bytes: ld(&self.wrong_bytes),
            first_wrong: *lock(&self.first_wrong),
            cancelled: ld(&self.cancelled),
            rejected_expected: ld(&self.rejected_expected),
            errors: errors
                .iter()
                .map(|(k, v)| (k.as_str().to_string(), *v))
                .collect(),
            unexpected_errors: ld(&self.unexpected),
            first_unexpected: lock(&self.first_unexpected).clone(),
            latency_us: LatencyReport {
                count: h.len(),
                p50: h.value_at_quantile(0.5),
                p99: h.value_at_quantile(0.99),
                max: h.max(),
            },
            storms: ld(&self.storms),
            storm_requests: ld(&self.storm_requests),
            storm_max_inflight: ld(&self.storm_max_inflight),
            storm_drop_max_ms: ld(&self.storm_drop_max_us) as f64 / 1e3,
            engine_starts: ld(&self.engine_starts),
            eio: EioAccount {
                injected: eio_log.len() as u64,
                reported: seen.len() as u64,
                explained_by_unobserved: explained,
                swallowed,
                reported_not_injected: not_injected,
                reported_twice,
            },
            open_failures: OpenAccount {
                injected: injected.open_failures,
                observed: errors.get(&ErrorKind::Open).copied().unwrap_or(0),
            },
            injected,
            resources: Resources::default(),
        }
    }
}

/// Faults the sources injected (summed over every engine's source).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Injected {
    pub reads: u64,
    pub short_reads: u64,
    pub eintr: u64,
    pub eio: u64,
    pub spikes: u64,
    pub open_failures: u64,
    pub bit_flips: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LatencyReport {
    pub count: u64,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

/// Injected EIOs against what requests reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct EioAccount {
    /// Read calls that failed with an injected EIO.
    pub injected: u64,
    /// Distinct injected EIOs some request reported (as `Read` errors).
    pub reported: u64,
    /// Injected EIOs not reported because their request's outcome was not observed as a
    /// success (another chunk's error came first, or it was cancelled or lost).
    pub explained_by_unobserved: u64,
    /// Injected EIOs that only successful requests overlapped: an error turned into success.
    pub swallowed: u64,
    /// Reported EIOs that were never injected (or came from another engine's source).
    pub reported_not_injected: u64,
    /// The same injected EIO reported more than once (double completion).
    pub reported_twice: u64,
}

/// Injected handle-open failures against failed engine starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct OpenAccount {
    pub injected: u64,
    pub observed: u64,
}

/// Process resources before the run and after everything was dropped (Linux; `None` where not
/// measurable, e.g. under Wine).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Resources {
    pub fds_before: Option<usize>,
    pub fds_after: Option<usize>,
    pub threads_before: Option<usize>,
    pub threads_after: Option<usize>,
    /// Pinned (staging) bytes still allocated after every engine was dropped.
    pub pinned_live_after: u64,
    /// Pinned buffers allocated over the run (staging rings and poison buffers).
    pub pinned_allocs: u64,
}

/// The result of a stress run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    /// Requests (batches) issued by clients, including cancelled and rejected ones.
    pub ops: u64,
    /// Requests that completed Ok and whose bytes were all verified.
    pub ok: u64,
    pub bytes_verified: u64,
    pub wall_s: f64,
    /// Of `wall_s`: before the first operation (writing the stress file, starting the engine).
    pub setup_s: f64,
    /// Of `wall_s`: from the first operation until every client has stopped (what `--duration`
    /// bounds: no operation starts that cannot finish by then). The rest is the final checks.
    pub ops_s: f64,
    pub gib_per_s: f64,
    /// Requests that never completed.
    pub lost: u64,
    /// Bytes that arrived wrong (or never arrived) in requests that reported success.
    pub wrong_bytes: u64,
    pub first_wrong: Option<WrongByte>,
    /// Tickets dropped or futures dropped mid-flight on purpose.
    pub cancelled: u64,
    /// Deliberately bad requests refused with the right typed error.
    pub rejected_expected: u64,
    /// Errors by kind.
    pub errors: BTreeMap<String, u64>,
    /// Errors the fault plan does not explain (a kind nobody injected, an EIO naming the wrong
    /// range, a bad request accepted, a shutdown error from an engine that was not stopping).
    pub unexpected_errors: u64,
    pub first_unexpected: Option<String>,
    /// Request latency (submit to verified completion), microseconds.
    pub latency_us: LatencyReport,
    /// Shutdown storms: engines dropped with requests in flight.
    pub storms: u64,
    pub storm_requests: u64,
    pub storm_max_inflight: u64,
    pub storm_drop_max_ms: f64,
    pub engine_starts: u64,
    pub injected: Injected,
    pub eio: EioAccount,
    pub open_failures: OpenAccount,
    pub resources: Resources,
}

impl Report {
    /// Why the run failed, if it did: lost or wrong bytes, errors nobody injected, injected
    /// errors that turned into successes or were reported wrongly, leaked resources.
    pub fn failures(&self) -> Vec<String> {
        let mut f = Vec::new();
        if self.ok == 0 {
            // A run that verified nothing (--ops 0, --duration 0s) held nothing either.
            f.push(format!(
                "no operation completed ({} started): nothing was verified",
                self.ops
            ));
        }
        if self.lost > 0 {
            f.push(format!("{} requests lost", self.lost));
        }
        if self.wrong_bytes > 0 {
            f.push(format!(
                "{} wrong bytes (first: {:?})",
                self.wrong_bytes, self.first_wrong
            ));
        }
        if self.unexpected_errors > 0 {
            f.push(format!(
                "{} unexpected errors (first: {})",
                self.unexpected_errors,
                self.first_unexpected.as_deref().unwrap_or("?")
            ));
        }
        let e = &self.eio;
        if e.swallowed > 0 || e.reported_not_injected > 0 || e.reported_twice > 0 {
            f.push(format!(
                "EIO accounting: {} swallowed, {} reported but not injected, {} reported twice",
                e.swallowed, e.reported_not_injected, e.reported_twice
            ));
        }
        if self.open_failures.injected != self.open_failures.observed {
            f.push(format!(
                "{} handle-open failures injected, {} engine starts failed with them",
                self.open_failures.injected, self.open_failures.observed
            ));
        }
        let r = &self.resources;
        if let (Some(a), Some(b)) = (r.fds_before, r.fds_after) {
            if b > a {
                f.push(format!("{} file descriptors leaked ({a} -> {b})", b - a));
            }
        }
        if r.pinned_live_after > 0 {
            f.push(format!("{} pinned bytes leaked", r.pinned_live_after));
        }
        f
    }

    pub fn passed(&self) -> bool {
        self.failures().is_empty()
    }

    /// Human-readable summary.
    pub fn text(&self) -> String {
        use ds4_stream::units::group_digits as g;
        let mut s = String::new();
        let errs: Vec<String> = self
            .errors
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let i = &self.injected;
        s += &format!(
            "ops {} (ok {}, cancelled {}, rejected {}), {} B verified in {:.1} s ({:.2} GiB/s)\n",
            g(self.ops),
            g(self.ok),
            g(self.cancelled),
            g(self.rejected_expected),
            g(self.bytes_verified),
            self.wall_s,
            self.gib_per_s
        );
        s += &format!(
            "time: set-up {:.1} s, operations {:.1} s, final checks {:.1} s\n",
            self.setup_s,
            self.ops_s,
            (self.wall_s - self.setup_s - self.ops_s).max(0.0)
        );
        s += &format!(
            "latency us: p50 {} p99 {} max {}\n",
            g(self.latency_us.p50),
            g(self.latency_us.p99),
            g(self.latency_us.max)
        );
        s += &format!(
            "errors: {}\n",
            if errs.is_empty() {
                "none".to_string()
            } else {
                errs.join(", ")
            }
        );
        s += &format!(
            "injected: {} reads, {} short, {} EINTR, {} EIO, {} spikes, {} open failures, {} bit \
             flips\n",
            g(i.reads),
            g(i.short_reads),
            g(i.eintr),
            g(i.eio),
            g(i.spikes),
            i.open_failures,
            g(i.bit_flips)
        );
        s += &format!(
            "EIO: {} injected, {} reported, {} in unobserved requests, {} swallowed; open \
             failures: {} injected, {} observed\n",
            self.eio.injected,
            self.eio.reported,
            self.eio.explained_by_unobserved,
            self.eio.swallowed,
            self.open_failures.injected,
            self.open_failures.observed
        );
        s += &format!(
            "shutdown storms: {} ({} requests, up to {} in flight, drop took up to {:.1} ms); \
             engine starts {}\n",
            self.storms,
            g(self.storm_requests),
            self.storm_max_inflight,
            self.storm_drop_max_ms,
            self.engine_starts
        );
        let r = &self.resources;
        let opt = |v: Option<usize>| v.map_or("n/a".to_string(), |v| v.to_string());
        s += &format!(
            "resources: fds {} -> {}, threads {} -> {}, pinned live after {} B ({} allocs)\n",
            opt(r.fds_before),
            opt(r.fds_after),
            opt(r.threads_before),
            opt(r.threads_after),
            r.pinned_live_after,
            r.pinned_allocs
        );
        s += &format!("lost {}, wrong_bytes {}\n", self.lost, self.wrong_bytes);
        s
    }
}
