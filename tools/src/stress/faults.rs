//! Fault plans for the stress run and the bookkeeping that proves injected faults surface as
//! errors of the matching kind: a textual spec ([`FaultSpec::parse`]), a source wrapper that
//! logs every injected EIO with its read ([`LoggedSource`]), and the classification of engine
//! errors ([`classify`]).
//!
//! Short reads and EINTR storms are hidden by the exact-read loop by contract, so they must
//! never surface at all: a stress run with only those faults has zero errors. EIO (at op N or
//! with probability p) must fail exactly the request whose read it hit, named by path, offset,
//! length and label. A handle that fails to open must fail the engine start with an `Open`
//! error carrying the injected fault. Latency spikes and slow copies only slow things down.

use ds4_io::fault::{injected, FaultPlan, InjectedFault};
use ds4_io::{ReadAt, Source};
use ds4_stream::engine::EngineError;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// What to inject, parsed from `--faults`.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct FaultSpec {
    /// Probability that an injected read system call returns short.
    pub short: f64,
    /// Probability that an injected system call starts an EINTR storm, and its longest run.
    pub eintr: f64,
    pub eintr_storm_max: u32,
    /// Probability that a read call fails with EIO.
    pub eio: f64,
    /// The read call with this number (per engine source, from 1) fails with EIO.
    pub eio_at: Option<u64>,
    /// Probability of a latency spike on a read call, and its length.
    pub spike: f64,
    #[serde(serialize_with = "ser_duration")]
    pub spike_len: Duration,
    /// Added to every read call.
    #[serde(serialize_with = "ser_duration")]
    pub latency: Duration,
    /// Probability that an engine start (the main engine's first, each storm engine's) has one
    /// worker whose handle fails to open.
    pub open_fail: f64,
    /// Delay before every host-to-device copy (the host backend's copy thread).
    #[serde(serialize_with = "ser_duration")]
    pub slow_copy: Duration,
    /// Probability that a successful read comes back with one bit flipped: silent corruption
    /// that only the verifier can catch. A self-test of the verifier: a run with it must fail
    /// with wrong bytes.
    pub bitflip: f64,
}

fn ser_duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e3)
}

/// The preset `all`: every fault at once, at rates a run of a minute survives with plenty of
/// successful reads.
pub const ALL: &str =
    "short=0.05,eintr=0.02:8,eio=0.0005,eio-at=1000,spike=0.002:20ms,open-fail=0.3,slow-copy=100us";

impl FaultSpec {
    /// Parses `none`, `all`, or a comma-separated list of `short=P`, `eintr=P[:MAX]`, `eio=P`,
    /// `eio-at=N`, `spike=P:DURATION`, `latency=DURATION`, `open-fail=P`, `slow-copy=DURATION`,
    /// `bitflip=P` (durations like `20ms`, `150us`, `1s`). Later items override earlier ones, so
    /// `all,eio=0` is everything but random EIO.
    pub fn parse(s: &str) -> Result<FaultSpec, String> {
        let mut f = FaultSpec {
            eintr_storm_max: 8,
            ..FaultSpec::default()
        };
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            match item {
                "none" => f = FaultSpec::parse("")?,
                "all" => f = FaultSpec::parse(ALL)?,
                _ => f.set(item)?,
            }
        }
        Ok(f)
    }

    fn set(&mut self, item: &str) -> Result<(), String> {
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| format!("fault {item:?} needs a value (like short=0.05)"))?;
        let (a, b) = match v.split_once(':') {
            Some((a, b)) => (a, Some(b)),
            None => (v, None),
        };
        match (k, b) {
            ("short", None) => self.short = prob(k, a)?,
            ("eintr", _) => {
                self.eintr = prob(k, a)?;
                if let Some(b) = b {
                    self.eintr_storm_max = b
                        .parse()
                        .map_err(|_| format!("eintr storm length {b:?} is not a count"))?;
                }
            }
            ("eio", None) => self.eio = prob(k, a)?,
            ("eio-at", None) => {
                let n: u64 = a
                    .parse()
                    .map_err(|_| format!("eio-at {a:?} is not a read number"))?;
                self.eio_at = (n > 0).then_some(n);
            }
            ("spike", Some(b)) => {
                self.spike = prob(k, a)?;
                self.spike_len = parse_duration(b)?;
            }
            ("latency", None) => self.latency = parse_duration(a)?,
            ("open-fail", None) => self.open_fail = prob(k, a)?,
            ("slow-copy", None) => self.slow_copy = parse_duration(a)?,
            ("bitflip", None) => self.bitflip = prob(k, a)?,
            _ => return Err(format!("unknown fault {item:?} (see --help)")),
        }
        Ok(())
    }

    /// True when some fault makes requests fail (EIO).
    pub fn fails_reads(&self) -> bool {
        self.eio > 0.0 || self.eio_at.is_some()
    }

    /// The `ds4_io` plan of one engine's source (open failures are chosen per start).
    pub fn plan(&self, seed: u64, fail_open_at: Option<u64>) -> FaultPlan {
        FaultPlan {
            seed,
            short_read_prob: self.short,
            eintr_prob: self.eintr,
            eintr_storm_max: self.eintr_storm_max,
            eio_at_op: self.eio_at,
            eio_prob: self.eio,
            latency: self.latency,
            spike_prob: self.spike,
            spike: self.spike_len,
            fail_open_at,
            bit_flip_prob: self.bitflip,
        }
    }
}

fn prob(k: &str, v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!("{k} probability {v:?} is not in 0..=1")),
    }
}

/// Parses `20ms`, `150us`, `2s`, `1.5s`, `100ns`, `3m`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("duration {s:?} has no number"))?;
    let secs = match unit {
        "ns" => n / 1e9,
        "us" | "µs" => n / 1e6,
        "ms" => n / 1e3,
        "s" | "" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => {
            return Err(format!(
                "duration {s:?}: unit must be ns, us, ms, s, m or h"
            ))
        }
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("duration {s:?} is out of range"))
}

/// One injected EIO as the read saw it: which source (engine), which read call, which range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EioEntry {
    pub source: u32,
    pub op: u64,
    pub offset: u64,
    pub len: u64,
}

/// Every injected EIO of a run.
#[derive(Debug, Default)]
pub struct EioLog(Mutex<Vec<EioEntry>>);

impl EioLog {
    pub fn entries(&self) -> Vec<EioEntry> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
    fn push(&self, e: EioEntry) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(e);
    }
}

/// Wraps an engine's (faulty) source and logs every injected EIO its handles return.
pub struct LoggedSource {
    inner: Arc<dyn Source>,
    id: u32,
    log: Arc<EioLog>,
}

impl LoggedSource {
    pub fn new(inner: Arc<dyn Source>, id: u32, log: Arc<EioLog>) -> Self {
        Self { inner, id, log }
    }
}

impl Source for LoggedSource {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn open_handle(&self) -> io::Result<Box<dyn ReadAt>> {
        Ok(Box::new(LoggedHandle {
            inner: self.inner.open_handle()?,
            id: self.id,
            log: Arc::clone(&self.log),
        }))
    }
}

struct LoggedHandle {
    inner: Box<dyn ReadAt>,
    id: u32,
    log: Arc<EioLog>,
}

impl ReadAt for LoggedHandle {
    fn read_exact_at(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let r = self.inner.read_exact_at(buf, offset);
        if let Err(e) = &r {
            if let Some(InjectedFault::Eio { op }) = injected(e) {
                self.log.push(EioEntry {
                    source: self.id,
                    op: *op,
                    offset,
                    len: buf.len() as u64,
                });
            }
        }
        r
    }
    ds4_io::forward_read_at!(inner);
}

/// Kinds of errors a stress run counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// A read failed with an injected EIO.
    Eio,
    /// The engine shut down before the request was read (shutdown storms).
    Shutdown,
    /// An engine failed to start because an injected handle-open failure.
    Open,
    /// A bad request refused at submit (out of file, out of buffer, destination busy).
    Rejected,
    /// A read failed with an error nobody injected.
    ReadOther,
    /// A device (copy) error.
    Device,
    /// A chunk was lost (an engine thread stopped).
    Lost,
    /// Anything else.
    Other,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Eio => "eio",
            ErrorKind::Shutdown => "shutdown",
            ErrorKind::Open => "open",
            ErrorKind::Rejected => "rejected",
            ErrorKind::ReadOther => "read_other",
            ErrorKind::Device => "device",
            ErrorKind::Lost => "lost",
            ErrorKind::Other => "other",
        }
    }
}

/// The kind of `e`, and for an injected EIO its read call number.
pub fn classify(e: &EngineError) -> (ErrorKind, Option<u64>) {
    match e {
        EngineError::Read { source, .. } => match injected(source) {
            Some(InjectedFault::Eio { op }) => (ErrorKind::Eio, Some(*op)),
            _ => (ErrorKind::ReadOther, None),
        },
        EngineError::Open { source, .. } | EngineError::Workers { source } => {
            match injected(source) {
                Some(InjectedFault::OpenFailed { .. }) => (ErrorKind::Open, None),
                _ => (ErrorKind::Other, None),
            }
        }
        EngineError::Shutdown { .. } => (ErrorKind::Shutdown, None),
        EngineError::OutOfFile { .. }
        | EngineError::OutOfBuffer { .. }
        | EngineError::DestinationBusy { .. } => (ErrorKind::Rejected, None),
        EngineError::Device { .. } => (ErrorKind::Device, None),
        EngineError::Lost { .. } => (ErrorKind::Lost, None),
        _ => (ErrorKind::Other, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_override() {
        let f = FaultSpec::parse("all,eio=0").unwrap();
        assert_eq!(f.eio, 0.0);
        assert_eq!(f.eio_at, Some(1000));
        assert_eq!(f.spike_len, Duration::from_millis(20));
        assert_eq!(f.slow_copy, Duration::from_micros(100));
        assert_eq!(
            FaultSpec::parse("none").unwrap().plan(1, None).eio_prob,
            0.0
        );
        let f = FaultSpec::parse("eintr=0.5:3,latency=1ms").unwrap();
        assert_eq!((f.eintr, f.eintr_storm_max), (0.5, 3));
        assert_eq!(f.latency, Duration::from_millis(1));
        for bad in [
            "short",
            "short=2",
            "eio-at=x",
            "spike=0.1",
            "bogus=1",
            "latency=5parsecs",
        ] {
            assert!(FaultSpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("ms").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}
