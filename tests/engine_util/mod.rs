//! Shared helpers of the engine tests: small configs, a test-only probe source (gated reads,
//! alignment accounting), read-back and verification, and a watchdog that fails a test instead of hanging.
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

/// Both kinds of host device, named, then every GPU device this build and machine have (see
/// [`gpu_devices`]).
pub fn devices() -> Vec<(&'static str, Arc<dyn Device>)> {
    let mut v: Vec<(&'static str, Arc<dyn Device>)> = vec![
        ("unified", unified()),
        ("discrete", discrete(Duration::ZERO)),
    ];
    v.extend(gpu_devices());
    v
}

/// The GPU devices of the backends compiled in: CUDA and HIP, each staged (copies issued by the
/// caller, and by the copy thread) and forced unified (mapped pinned memory). A backend whose device is absent is skipped with a note on stderr, unless
/// `DS4_GPU_TESTS` names it (`cuda`, `hip`, comma-separated): then absence fails the test, so
/// a GPU machine run cannot pass by skipping.
pub fn gpu_devices() -> Vec<(&'static str, Arc<dyn Device>)> {
    #[allow(unused_mut)]
    let mut v: Vec<(&'static str, Arc<dyn Device>)> = Vec::new();
    #[cfg(feature = "cuda")]
    {
        use ds4_stream::device::cuda::{CudaConfig, CudaDevice};
        // Staged with copies issued by the caller (the default), on four copy streams (one per
        // reader thread), through the copy thread (opt-in: `DS4_COPY_THREAD=on`), and forced
        // unified.
        for (name, unified, thread, streams) in [
            ("cuda", false, None, None),
            ("cuda-streams", false, None, Some(4)),
            ("cuda-copy-thread", false, Some(true), None),
            ("cuda-unified", true, None, None),
        ] {
            let cfg = CudaConfig {
                ordinal: 0,
                unified: Some(unified),
                copy_thread: thread,
                copy_streams: streams,
                ..Default::default()
            };
            match CudaDevice::new(cfg) {
                Ok(d) => v.push((name, Arc::new(d) as Arc<dyn Device>)),
                Err(e) => skip_or_fail("cuda", &e.to_string()),
            }
        }
    }
    #[cfg(feature = "hip")]
    {
        use ds4_stream::device::hip::{HipConfig, HipDevice};
        // Staged with copies issued by the caller (the default), on four copy streams (one per
        // reader thread), through the copy thread (opt-in: `DS4_COPY_THREAD=on`), and forced
        // unified.
        for (name, unified, thread, streams) in [
            ("hip", false, None, None),
            ("hip-streams", false, None, Some(4)),
            ("hip-copy-thread", false, Some(true), None),
            ("hip-unified", true, None, None),
        ] {
            let cfg = HipConfig {
                ordinal: 0,
                unified: Some(unified),
                copy_thread: thread,
                copy_streams: streams,
                ..Default::default()
            };
            match HipDevice::new(cfg) {
                Ok(d) => v.push((name, Arc::new(d) as Arc<dyn Device>)),
                Err(e) => skip_or_fail("hip", &e.to_string()),
            }
        }
    }
    v
}

/// The GPUs of the backends compiled in, as kernel-running devices (default memory mode), by
/// backend name; absence as in [`gpu_devices`].
#[cfg(any(feature = "cuda", feature = "hip"))]
pub fn compute_gpus() -> Vec<(&'static str, Arc<dyn ds4_stream::device::GpuDevice>)> {
    compute_gpus_with(None)
}

/// [`compute_gpus`] with `copy_streams` host-to-device copy streams (`None`: the default).
#[cfg(any(feature = "cuda", feature = "hip"))]
pub fn compute_gpus_with(
    copy_streams: Option<usize>,
) -> Vec<(&'static str, Arc<dyn ds4_stream::device::GpuDevice>)> {
    #[allow(unused_mut)]
    let mut out: Vec<(&'static str, Arc<dyn ds4_stream::device::GpuDevice>)> = Vec::new();
    #[cfg(feature = "cuda")]
    {
        use ds4_stream::device::cuda::{CudaConfig, CudaDevice};
        let cfg = CudaConfig {
            copy_streams,
            ..Default::default()
        };
        match CudaDevice::new(cfg) {
            Ok(d) => out.push(("cuda", Arc::new(d))),
            Err(e) => skip_or_fail("cuda", &e.to_string()),
        }
    }
    #[cfg(feature = "hip")]
    {
        use ds4_stream::device::hip::{HipConfig, HipDevice};
        let cfg = HipConfig {
            copy_streams,
            ..Default::default()
        };
        match HipDevice::new(cfg) {
            Ok(d) => out.push(("hip", Arc::new(d))),
            Err(e) => skip_or_fail("hip", &e.to_string()),
        }
    }
    out
}

/// Notes a missing GPU backend, or fails when `DS4_GPU_TESTS` demands it.
pub fn skip_or_fail(backend: &str, why: &str) {
    let wanted = std::env::var("DS4_GPU_TESTS").unwrap_or_default();
    if wanted.split(',').any(|b| b.trim() == backend) {
        panic!("DS4_GPU_TESTS asks for {backend}, which cannot start: {why}");
    }
    eprintln!("note: {backend} tests skipped: {why}");
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

/// A test probe around another source: reads can wait on a [`Gate`] (a request in flight,
/// deterministically), and handles can claim an unbuffered path needing an alignment while
/// counting the reads that break it. Injected faults (EIO at the Nth read, latency) are
/// `ds4_io::fault::FaultySource`'s job.
pub struct ProbeSource {
    inner: Arc<dyn Source>,
    unaligned: Arc<AtomicU64>,
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

impl ProbeSource {
    pub fn new(inner: Arc<dyn Source>) -> Self {
        Self {
            inner,
            unaligned: Arc::new(AtomicU64::new(0)),
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
    pub fn unaligned_reads(&self) -> u64 {
        self.unaligned.load(Ordering::SeqCst)
    }
}

struct ProbeHandle {
    inner: Box<dyn ReadAt>,
    unaligned: Arc<AtomicU64>,
    align: Option<usize>,
    gate: Option<Gate>,
}

impl ReadAt for ProbeHandle {
    fn read_exact_at(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if let Some(g) = &self.gate {
            g.pass();
        }
        if let Some(a) = self.align {
            let a = a as u64;
            if offset % a != 0 || buf.len() as u64 % a != 0 || buf.as_ptr() as u64 % a != 0 {
                self.unaligned.fetch_add(1, Ordering::SeqCst);
            }
        }
        self.inner.read_exact_at(buf, offset)
    }
    fn direct_alignment(&self) -> Option<usize> {
        self.align.or(self.inner.direct_alignment())
    }
}

impl Source for ProbeSource {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn open_handle(&self) -> io::Result<Box<dyn ReadAt>> {
        Ok(Box::new(ProbeHandle {
            inner: self.inner.open_handle()?,
            unaligned: Arc::clone(&self.unaligned),
            align: self.align,
            gate: self.gate.clone(),
        }))
    }
}
