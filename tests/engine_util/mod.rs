//! Shared helpers of the engine tests: small configs, test-only sources (fail the Nth read,
//! slow reads), read-back and verification, and a watchdog that fails a test instead of hanging.
#![allow(dead_code)] // each test file uses a different subset

use ds4_io::pattern::{verify, PatternSource};
use ds4_io::{ReadAt, Source};
use ds4_stream::device::{Device, DeviceBuffer, HostConfig, HostDevice};
use ds4_stream::engine::{Engine, EngineConfig};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub const SEED: u64 = 0x05ee_dd54_0000_0001;
pub const KIB: usize = 1024;
pub const MIB: usize = 1024 * 1024;

/// A small engine config: 4 workers, `slots` slots of `slot_bytes`.
pub fn cfg(slots: usize, slot_bytes: usize) -> EngineConfig {
    EngineConfig {
        workers: 4,
        slots,
        slot_bytes,
        queue_depth: 8,
        ..EngineConfig::default()
    }
}

/// Host device reading straight into destinations (unified memory).
pub fn unified() -> Arc<dyn Device> {
    Arc::new(HostDevice::new(HostConfig::default()).expect("host device starts"))
}

/// Host device emulating a discrete GPU: staging ring + copy thread, copies delayed.
pub fn discrete(delay: Duration) -> Arc<dyn Device> {
    Arc::new(HostDevice::discrete(delay).expect("host device starts"))
}

/// Both kinds of host device, named.
pub fn devices() -> Vec<(&'static str, Arc<dyn Device>)> {
    vec![
        ("unified", unified()),
        ("discrete", discrete(Duration::ZERO)),
    ]
}

pub fn pattern_engine(len: u64, device: Arc<dyn Device>, cfg: EngineConfig) -> Engine {
    Engine::new(Arc::new(PatternSource::new(len, SEED)), device, cfg).expect("engine starts")
}

/// Reads a whole destination back through the device.
pub fn read_back(device: &dyn Device, buf: &DeviceBuffer, offset: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    device.read_d2h(buf, offset, &mut v).expect("read back");
    v
}

/// Asserts that `buf[dst_offset..dst_offset + len]` holds the pattern of file `[offset, +len)`.
pub fn assert_pattern(
    device: &dyn Device,
    buf: &DeviceBuffer,
    dst_offset: usize,
    offset: u64,
    len: usize,
) {
    let got = read_back(device, buf, dst_offset, len);
    if let Err(m) = verify(SEED, offset, &got) {
        panic!("read of file offset {offset} ({len} bytes) into dst+{dst_offset}: {m}");
    }
}

/// Runs `f` on a thread; fails the test if it does not finish within `limit` (no hang).
pub fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => {
            let _ = t.join();
            v
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("did not finish within {limit:?}: hang")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => match t.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(()) => unreachable!("sent before exiting"),
        },
    }
}

/// A source whose reads number k (counted across all handles, from 1) for k in `fail_at`
/// fail with EIO; optionally every read sleeps `delay`. Wraps another source.
pub struct FaultySource {
    inner: Arc<dyn Source>,
    reads: Arc<AtomicU64>,
    unaligned: Arc<AtomicU64>,
    fail_at: Arc<Vec<u64>>,
    delay: Duration,
    align: Option<usize>,
    gate: Option<Gate>,
}

/// Blocks reads until opened (deterministic "request in flight" without timing).
#[derive(Clone, Default)]
pub struct Gate(Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>);

impl Gate {
    pub fn open(&self) {
        *self.0 .0.lock().unwrap() = true;
        self.0 .1.notify_all();
    }
    fn pass(&self) {
        let mut open = self.0 .0.lock().unwrap();
        while !*open {
            open = self.0 .1.wait(open).unwrap();
        }
    }
}

impl FaultySource {
    pub fn new(inner: Arc<dyn Source>, fail_at: Vec<u64>, delay: Duration) -> Self {
        Self {
            inner,
            reads: Arc::new(AtomicU64::new(0)),
            unaligned: Arc::new(AtomicU64::new(0)),
            fail_at: Arc::new(fail_at),
            delay,
            align: None,
            gate: None,
        }
    }
    /// Every read waits until `gate` is opened.
    pub fn with_gate(mut self, gate: Gate) -> Self {
        self.gate = Some(gate);
        self
    }
    /// Handles claim an unbuffered path needing `align` (like O_DIRECT) and count the reads
    /// whose offset, length or buffer address is not aligned.
    pub fn with_alignment(mut self, align: usize) -> Self {
        self.align = Some(align);
        self
    }
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::SeqCst)
    }
    pub fn unaligned_reads(&self) -> u64 {
        self.unaligned.load(Ordering::SeqCst)
    }
}

struct FaultyHandle {
    inner: Box<dyn ReadAt>,
    reads: Arc<AtomicU64>,
    unaligned: Arc<AtomicU64>,
    fail_at: Arc<Vec<u64>>,
    delay: Duration,
    align: Option<usize>,
    gate: Option<Gate>,
}

impl ReadAt for FaultyHandle {
    fn read_exact_at(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if let Some(g) = &self.gate {
            g.pass();
        }
        let k = self.reads.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(a) = self.align {
            let a = a as u64;
            if offset % a != 0 || buf.len() as u64 % a != 0 || buf.as_ptr() as u64 % a != 0 {
                self.unaligned.fetch_add(1, Ordering::SeqCst);
            }
        }
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        if self.fail_at.contains(&k) {
            return Err(io::Error::from_raw_os_error(libc_eio()));
        }
        self.inner.read_exact_at(buf, offset)
    }
    fn direct_alignment(&self) -> Option<usize> {
        self.align.or(self.inner.direct_alignment())
    }
}

/// EIO's number (5 on Linux, macOS and in Windows' C runtime).
fn libc_eio() -> i32 {
    5
}

impl Source for FaultySource {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn open_handle(&self) -> io::Result<Box<dyn ReadAt>> {
        Ok(Box::new(FaultyHandle {
            inner: self.inner.open_handle()?,
            reads: Arc::clone(&self.reads),
            unaligned: Arc::clone(&self.unaligned),
            fail_at: Arc::clone(&self.fail_at),
            delay: self.delay,
            align: self.align,
            gate: self.gate.clone(),
        }))
    }
}
