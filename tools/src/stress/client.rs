//! The stress clients: plan a random operation, prepare poisoned destinations, submit through
//! the engine, wait (or cancel on purpose), verify every byte that reports success, and count
//! every other outcome. Blocking clients ([`thread_client`]) use tickets and `wait_timeout`;
//! async clients ([`task_client`]) `.await` tickets and `read_bytes_async` under tokio
//! timeouts (a timeout that fires drops the future mid-flight: a cancellation).
//!
//! Operation mix: DS4 expert fetches (3 slices of 2,162,688 / 2,162,688 / 2,752,512 bytes in
//! one batch, one destination like a cache slot), single expert slices, small unaligned reads
//! (1 B .. 64 KiB), 1-byte reads, reads straddling 2 GiB / 4 GiB / the end of the file,
//! whole-tensor reads (553,648,128 and 704,643,072 bytes: one layer's gate and down experts),
//! multi-GiB reads across both 2 and 4 GiB, and deliberately bad requests that must be refused
//! with the matching typed error.

use super::content::{Expect, WrongByte, POISON};
use super::faults::{classify, ErrorKind};
use super::report::Tally;
use super::Budget;
use ds4_stream::device::{Device, DeviceBuffer, PinnedBuf};
use ds4_stream::engine::{Engine, EngineError, ReadRequest, Ticket};
use ds4_stream::errors::chain;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// DS4 q2 expert slices: gate, up (IQ2_XXS), down (Q2_K).
pub const EXPERT_SLICES: [usize; 3] = [2_162_688, 2_162_688, 2_752_512];
/// Whole routed tensors of one DS4 layer: gate/up (256 experts x 2,162,688) and down.
pub const TENSORS: [usize; 2] = [553_648_128, 704_643_072];
const MIB: usize = 1 << 20;
/// Piece size for poisoning and reading back device memory.
const PIECE: usize = 4 * MIB;

/// splitmix64: seedable, cheap, good enough to pick operations.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `[0, n)`, 0 when `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next_u64() >> 11) as f64) / ((1u64 << 53) as f64) < p
    }
}

/// Where a request's bytes land.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// `Device::alloc`: staged through the ring on a discrete device.
    Device,
    /// `DeviceBuffer::host`: read straight into it.
    Host,
    /// `Engine::read_bytes_async` (async clients only): fresh memory the engine allocates.
    Bytes,
}

/// How the client treats its ticket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancel {
    /// Wait for the result (up to the lost timeout).
    No,
    /// Drop the ticket (or future) right after submitting.
    Now,
    /// Wait this long, then drop it if it has not completed.
    After(Duration),
}

/// A deliberately bad request and the error it must get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bad {
    PastEnd,
    OffsetOverflow,
    OutOfBuffer,
    OverlappingDestinations,
}

/// One planned operation.
#[derive(Clone, Debug)]
pub struct Op {
    pub kind: &'static str,
    /// (file offset, length, offset in the destination).
    pub ranges: Vec<(u64, usize, usize)>,
    pub dest_len: usize,
    pub dest: Dest,
    pub cancel: Cancel,
    pub bad: Option<Bad>,
}

impl Op {
    pub fn bytes(&self) -> u64 {
        self.ranges.iter().map(|r| r.1 as u64).sum()
    }
}

/// What every client shares.
pub struct Ctx {
    pub engine: Arc<Engine>,
    /// Id of the engine's source in the EIO log.
    pub source_id: u32,
    pub device: Arc<dyn Device>,
    pub expect: Arc<Expect>,
    pub tally: Arc<Tally>,
    pub budget: Arc<Budget>,
    pub work: Arc<super::Work>,
    pub cancel: f64,
    pub huge_bytes: u64,
    /// Largest operation drawn (bytes).
    pub max_op_bytes: u64,
    pub eio_expected: bool,
    pub lost_timeout: Duration,
    /// Requests accepted by `engine.submit` (to check completions against engine stats).
    pub submitted: Arc<AtomicU64>,
    pub async_client: bool,
}

impl Ctx {
    /// The largest operation to draw now: the memory budget, `--max-op`, and what can still
    /// finish before the deadline ([`super::Work::bytes_until_deadline`]; at least 1 MiB, so
    /// small reads go on to the end).
    fn op_cap(&self) -> u64 {
        self.budget
            .max()
            .min(self.max_op_bytes)
            .min(self.in_time(0))
    }

    /// Bytes an operation may still have to finish by the deadline, with `own` bytes of the
    /// budget held by the caller (not someone else's work in flight); at least 1 MiB.
    fn in_time(&self, own: u64) -> u64 {
        let verified = self.tally.bytes_verified.load(Ordering::Relaxed);
        let others = self.budget.used().saturating_sub(own);
        self.work
            .bytes_until_deadline(verified, others)
            .max(1 << 20)
    }

    /// A poisoned destination ([`poisoned`]), its preparation timed for the deadline's cap.
    fn poisoned(
        &self,
        dest: Dest,
        len: usize,
        reuse: bool,
        s: &mut Scratch,
    ) -> Result<Arc<DeviceBuffer>, String> {
        let t0 = Instant::now();
        let b = poisoned(self.device.as_ref(), dest, len, reuse, s)?;
        self.work.poisoned(len as u64, t0.elapsed());
        Ok(b)
    }

    /// After waiting for the budget: whether the operation still starts (the run is not over,
    /// and it can still finish in time; a multi-GiB read drawn early may get its bytes only
    /// near the end).
    fn still_starts(&self, op: &Op, held: u64) -> bool {
        !self.work.past_deadline() && op.bytes() <= self.in_time(held)
    }
}

/// Picks a random operation that fits the memory budget.
pub fn plan(rng: &mut Rng, file_len: u64, huge: u64, budget: u64, async_client: bool) -> Op {
    loop {
        let op = plan_any(rng, file_len, huge, async_client);
        if op.bytes() <= budget && op.dest_len as u64 <= budget {
            return op;
        }
    }
}

fn random_at(rng: &mut Rng, file_len: u64, len: usize, align: u64) -> u64 {
    let max = file_len.saturating_sub(len as u64);
    rng.below(max + 1) / align * align
}

fn plan_any(rng: &mut Rng, file_len: u64, huge: u64, async_client: bool) -> Op {
    let dest = match rng.below(if async_client { 3 } else { 2 }) {
        0 => Dest::Device,
        1 => Dest::Host,
        _ => Dest::Bytes,
    };
    let mut op = Op {
        kind: "",
        ranges: Vec::new(),
        dest_len: 0,
        dest,
        cancel: Cancel::No,
        bad: None,
    };
    let single = |op: &mut Op, kind, off, len| {
        op.kind = kind;
        op.ranges = vec![(off, len, 0)];
        op.dest_len = len;
    };
    match rng.below(1000) {
        0..=199 => {
            op.kind = "expert";
            let mut at = 0;
            for len in EXPERT_SLICES {
                let len = len.min(file_len as usize);
                op.ranges.push((random_at(rng, file_len, len, 32), len, at));
                at += len;
            }
            op.dest_len = at;
            if op.dest == Dest::Bytes {
                op.dest = Dest::Host; // a batch needs one destination buffer
            }
        }
        200..=399 => {
            let len = EXPERT_SLICES[rng.below(3) as usize].min(file_len as usize);
            let off = random_at(rng, file_len, len, 32);
            single(&mut op, "slice", off, len);
        }
        400..=649 => {
            let len = (1 + rng.below(64 * 1024)).min(file_len) as usize;
            let off = random_at(rng, file_len, len, 1);
            single(&mut op, "small", off, len);
        }
        650..=749 => {
            let off = rng.below(file_len);
            single(&mut op, "one_byte", off, 1);
        }
        750..=929 => {
            let bs = super::content::boundaries(file_len);
            let b = bs[rng.below(bs.len() as u64) as usize];
            let len = (1 + rng.below(8 * MIB as u64)).min(file_len) as usize;
            let before = 1 + rng.below(len as u64);
            let off = b.saturating_sub(before).min(file_len - len as u64);
            single(&mut op, "boundary", off, len);
        }
        930..=939 => {
            let len = TENSORS[rng.below(2) as usize].min(file_len as usize);
            let off = random_at(rng, file_len, len, 32);
            single(&mut op, "tensor", off, len);
        }
        940..=944 if huge > 0 && huge <= file_len => {
            // Across 2 GiB and 4 GiB when the file and the size allow it.
            let len = huge as usize;
            let g = 1u64 << 30;
            let off = if file_len > 4 * g && huge > 2 * g + 128 * MIB as u64 {
                (2 * g - 64 * MIB as u64 - rng.below(64 * MIB as u64)).min(file_len - huge)
            } else {
                random_at(rng, file_len, len, 1)
            };
            single(&mut op, "huge", off, len);
            if op.dest == Dest::Device {
                op.dest = Dest::Host; // reading back GiBs of device memory doubles the cost
            }
        }
        _ => {
            let bad = match rng.below(4) {
                0 => Bad::PastEnd,
                1 => Bad::OffsetOverflow,
                2 => Bad::OutOfBuffer,
                _ => Bad::OverlappingDestinations,
            };
            op.kind = "bad";
            op.bad = Some(bad);
            op.dest = Dest::Host;
            let len = 4096usize.min(file_len as usize).max(1);
            op.dest_len = len;
            op.ranges = match bad {
                Bad::PastEnd => vec![(file_len - len as u64 + 1, len, 0)],
                Bad::OffsetOverflow => vec![(u64::MAX - 10, len, 0)],
                Bad::OutOfBuffer => vec![(0, len, 1)],
                Bad::OverlappingDestinations => vec![(0, len, 0), (0, len / 2, len / 2)],
            };
        }
    }
    op
}

/// Picks how the client treats the ticket: mostly waits, with probability `p` cancels.
pub fn pick_cancel(rng: &mut Rng, p: f64) -> Cancel {
    if !rng.chance(p) {
        return Cancel::No;
    }
    if rng.below(2) == 0 {
        Cancel::Now
    } else {
        Cancel::After(Duration::from_micros(rng.below(3000)))
    }
}

/// A destination buffer whose first `len` bytes are [`POISON`]: with `reuse`, a recycled one
/// from `s` when one fits (it may be longer than `len`), else a fresh one of exactly `len`
/// bytes (bad requests need the exact size: "outside the buffer" depends on it).
pub fn poisoned(
    device: &dyn Device,
    dest: Dest,
    len: usize,
    reuse: bool,
    s: &mut Scratch,
) -> Result<Arc<DeviceBuffer>, String> {
    let cached = if reuse {
        s.take_cached(dest, len)
    } else {
        None
    };
    let b = match cached {
        Some(b) => b,
        None => Arc::new(
            match dest {
                Dest::Host | Dest::Bytes => DeviceBuffer::host(len),
                Dest::Device => device.alloc(len),
            }
            .map_err(|e| e.to_string())?,
        ),
    };
    if let Some(p) = b.memory().host_ptr() {
        // SAFETY: we hold the only `Arc` of `b` (fresh, or recycled only when its strong count
        // was 1: no request, engine thread or copy holds it any more), so nothing else reads
        // or writes this memory; `len <= b.len()`.
        unsafe { std::ptr::write_bytes(p.as_ptr(), POISON, len) };
        return Ok(b);
    }
    let src = match &mut s.poison {
        Some(p) => p,
        None => {
            let mut p = device.alloc_pinned(PIECE).map_err(|e| e.to_string())?;
            p.as_mut_slice().map_err(|e| e.to_string())?.fill(POISON);
            s.poison.insert(p)
        }
    };
    let mut at = 0;
    while at < len {
        let n = PIECE.min(len - at);
        device
            .copy_h2d_async(src, 0, &b, at, n)
            .map_err(|e| e.to_string())?;
        at += n;
    }
    // Copies run in order: once the last has finished, the range is all poison.
    src.wait().map_err(|e| e.to_string())?;
    Ok(b)
}

/// Checks `dst[dst_off..dst_off + len]` against the file's `[offset, offset + len)`; returns
/// (wrong bytes, first wrong).
pub fn verify_dest(
    ctx: &Ctx,
    dst: &DeviceBuffer,
    dst_off: usize,
    offset: u64,
    len: usize,
    scratch: &mut Vec<u8>,
    readback: &mut Vec<u8>,
) -> (u64, Option<WrongByte>) {
    let mut first = None;
    if let Some(p) = dst.memory().host_ptr() {
        // SAFETY: the request writing this range completed (its ticket returned Ok), which
        // released its write lease; no engine thread writes it any more, and we hold an Arc,
        // so the memory is alive. `dst_off + len <= dst.len()` was validated at submit.
        let got = unsafe { std::slice::from_raw_parts(p.as_ptr().add(dst_off), len) };
        let n = ctx.expect.count_wrong(offset, got, scratch, &mut first);
        return (n, first);
    }
    let mut wrong = 0;
    let mut at = 0;
    while at < len {
        let n = PIECE.min(len - at);
        readback.resize(n, 0);
        if let Err(e) = ctx.device.read_d2h(dst, dst_off + at, &mut readback[..n]) {
            ctx.tally
                .unexpected(format!("read back of a finished request: {e}"));
            return (0, None);
        }
        wrong += ctx
            .expect
            .count_wrong(offset + at as u64, &readback[..n], scratch, &mut first);
        at += n;
    }
    (wrong, first)
}

/// Largest destination a client keeps for reuse, and how many it keeps.
const CACHE_MAX_BYTES: usize = 8 * MIB;
const CACHE_MAX: usize = 4;

/// Per-client scratch memory, and a few destinations kept for reuse (like an expert cache
/// reuses its slots; fresh multi-MiB allocations per read cost more in page faults than the
/// reads themselves).
#[derive(Default)]
pub struct Scratch {
    pub expect: Vec<u8>,
    pub readback: Vec<u8>,
    pub poison: Option<PinnedBuf>,
    cache: Vec<(Dest, Arc<DeviceBuffer>)>,
}

impl Scratch {
    /// A cached buffer of `dest`'s kind that holds `len` bytes without wasting much, and that
    /// nobody else holds (a cancelled request's engine may still be writing one).
    fn take_cached(&mut self, dest: Dest, len: usize) -> Option<Arc<DeviceBuffer>> {
        // `Arc::get_mut` (not `strong_count`): it also synchronises with the last holder's
        // drop, so that holder's writes happen-before ours.
        let i = self.cache.iter_mut().position(|(d, b)| {
            *d == dest
                && b.len() >= len
                && b.len() <= 2 * len + 64 * 1024
                && Arc::get_mut(b).is_some()
        })?;
        Some(self.cache.swap_remove(i).1)
    }

    /// Keeps `b` for reuse if it is small enough and there is room (else it is freed).
    fn recycle(&mut self, dest: Dest, b: Arc<DeviceBuffer>) {
        if dest != Dest::Bytes && b.len() <= CACHE_MAX_BYTES {
            if self.cache.len() >= CACHE_MAX {
                self.cache.remove(0);
            }
            self.cache.push((dest, b));
        }
    }
}

fn labels(id: u64, n: usize) -> Vec<Arc<str>> {
    (0..n).map(|i| Arc::from(format!("op{id}/{i}"))).collect()
}

/// Checks a bad request was refused with the error it deserves.
fn check_bad(ctx: &Ctx, op: &Op, r: Result<Ticket, EngineError>) {
    let want_ok = matches!(
        (op.bad, &r),
        (
            Some(Bad::PastEnd | Bad::OffsetOverflow),
            Err(EngineError::OutOfFile { .. })
        ) | (Some(Bad::OutOfBuffer), Err(EngineError::OutOfBuffer { .. }))
            | (
                Some(Bad::OverlappingDestinations),
                Err(EngineError::DestinationBusy { .. })
            )
    );
    if want_ok {
        ctx.tally.rejected_expected.fetch_add(1, Ordering::Relaxed);
        ctx.tally.error(ErrorKind::Rejected);
    } else {
        let got = match r {
            Ok(_) => "accepted".to_string(),
            Err(e) => e.to_string(),
        };
        ctx.tally.unexpected(format!(
            "bad request {:?} was not refused right: {got}",
            op.bad
        ));
    }
}

/// Classifies a failed request's error and checks it names one of the request's ranges.
pub fn failed(ctx: &Ctx, source: u32, op: &Op, labels: &[Arc<str>], e: &EngineError) {
    let (kind, eio_op) = classify(e);
    ctx.tally.error(kind);
    // `read_bytes` (the unlabelled requests) reads its range widened to 4096-byte boundaries
    // inside the file, so its reads (and their errors) may cover up to 4095 bytes either side.
    let file_len = ctx.engine.file_len();
    let read_range = |r: &(u64, usize, usize)| -> (u64, u64) {
        if labels.is_empty() && r.1 > 0 {
            let (a, b) = ds4_stream::engine::plan_widen(r.0, r.1, Some(4096), file_len, usize::MAX);
            (a, b - a)
        } else {
            (r.0, r.1 as u64)
        }
    };
    ctx.tally
        .unobserved(source, op.ranges.iter().map(read_range));
    match (kind, e) {
        (
            ErrorKind::Eio,
            EngineError::Read {
                offset, len, label, ..
            },
        ) if ctx.eio_expected => {
            if let Some(n) = eio_op {
                ctx.tally.reported_eio(source, n);
            }
            // Unlabelled requests (read_bytes_async) pass no labels.
            let inside = op.ranges.iter().enumerate().any(|(i, r)| {
                let label_ok = match labels.get(i) {
                    Some(l) => label.as_deref() == Some(&**l),
                    None => label.is_none(),
                };
                let (start, n) = read_range(r);
                label_ok && *offset >= start && offset + len <= start + n
            });
            if !inside {
                ctx.tally.unexpected(format!(
                    "EIO names a range outside its request ({:?}): {}",
                    op.ranges,
                    chain(e)
                ));
            }
        }
        _ => ctx
            .tally
            .unexpected(format!("{} request failed: {}", op.kind, chain(e))),
    }
}

/// Verifies a completed request's destination and counts it.
fn succeeded(ctx: &Ctx, op: &Op, dst: &DeviceBuffer, t0: Instant, s: &mut Scratch) {
    let mut wrong = 0;
    let mut first = None;
    for &(off, len, dst_off) in &op.ranges {
        let (w, f) = verify_dest(ctx, dst, dst_off, off, len, &mut s.expect, &mut s.readback);
        wrong += w;
        first = first.or(f);
    }
    ctx.tally.wrong(wrong, first);
    ctx.tally.latency(t0.elapsed());
    ctx.tally.ok.fetch_add(1, Ordering::Relaxed);
    ctx.tally
        .bytes_verified
        .fetch_add(op.bytes(), Ordering::Relaxed);
}

fn requests(op: &Op, dst: &Arc<DeviceBuffer>, labels: &[Arc<str>]) -> Vec<ReadRequest> {
    op.ranges
        .iter()
        .zip(labels)
        .map(|(&(off, len, dst_off), l)| {
            ReadRequest::new(off, len, Arc::clone(dst), dst_off).with_label(Arc::clone(l))
        })
        .collect()
}

/// A blocking client: runs operations until the work is done.
pub fn thread_client(ctx: Arc<Ctx>, seed: u64, lost: Arc<std::sync::Mutex<Vec<Ticket>>>) {
    let mut rng = Rng::new(seed);
    let mut s = Scratch::default();
    let file_len = ctx.expect.len();
    while let Some(id) = ctx.work.next() {
        let mut op = plan(&mut rng, file_len, ctx.huge_bytes, ctx.op_cap(), false);
        op.cancel = pick_cancel(&mut rng, ctx.cancel);
        let need = op.bytes().max(op.dest_len as u64);
        let _held = ctx.budget.acquire(need);
        if !ctx.still_starts(&op, need) {
            continue; // the budget came free too late for this one
        }
        ctx.tally.ops.fetch_add(1, Ordering::Relaxed);
        let reuse = op.bad.is_none();
        let dst = match ctx.poisoned(op.dest, op.dest_len, reuse, &mut s) {
            Ok(d) => d,
            Err(e) => {
                ctx.tally
                    .unexpected(format!("destination of {} bytes: {e}", op.dest_len));
                continue;
            }
        };
        let labels = labels(id, op.ranges.len());
        let t0 = Instant::now();
        let r = ctx.engine.submit(requests(&op, &dst, &labels));
        if op.bad.is_some() {
            check_bad(&ctx, &op, r);
            continue;
        }
        let ticket = match r {
            Ok(t) => t,
            Err(e) => {
                ctx.tally
                    .unexpected(format!("submit of a valid {} read: {}", op.kind, chain(&e)));
                continue;
            }
        };
        ctx.submitted.fetch_add(1, Ordering::Relaxed);
        let waited = match op.cancel {
            Cancel::Now => Err(ticket),
            Cancel::After(d) => ticket.wait_timeout(d),
            Cancel::No => match ticket.wait_timeout(ctx.lost_timeout) {
                Ok(r) => Ok(r),
                Err(t) => {
                    ctx.tally.lost.fetch_add(1, Ordering::Relaxed);
                    ctx.tally
                        .unobserved(ctx.source_id, op.ranges.iter().map(|r| (r.0, r.1 as u64)));
                    lost.lock().unwrap_or_else(|p| p.into_inner()).push(t);
                    continue;
                }
            },
        };
        match waited {
            Ok(Ok(())) => succeeded(&ctx, &op, &dst, t0, &mut s),
            Ok(Err(e)) => failed(&ctx, ctx.source_id, &op, &labels, &e),
            Err(t) => {
                // Cancelled on purpose: the engine keeps the destination alive and finishes.
                drop(t);
                ctx.tally.cancelled.fetch_add(1, Ordering::Relaxed);
                ctx.tally
                    .unobserved(ctx.source_id, op.ranges.iter().map(|r| (r.0, r.1 as u64)));
            }
        }
        s.recycle(op.dest, dst);
    }
}

/// An async client (tokio task): tickets are awaited under timeouts; `Bytes` destinations go
/// through `read_bytes_async`.
pub async fn task_client(ctx: Arc<Ctx>, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut s = Scratch::default();
    let file_len = ctx.expect.len();
    while let Some(id) = ctx.work.next() {
        let mut op = plan(&mut rng, file_len, ctx.huge_bytes, ctx.op_cap(), true);
        op.cancel = pick_cancel(&mut rng, ctx.cancel);
        // Never block a runtime thread on the budget: the tasks that would give bytes back
        // need those threads to run (a blocking acquire here deadlocked a 5-minute run).
        let need = op.bytes().max(op.dest_len as u64);
        let _held = loop {
            match ctx.budget.try_acquire(need) {
                Some(g) => break g,
                None => tokio::time::sleep(Duration::from_millis(1)).await,
            }
        };
        if !ctx.still_starts(&op, need) {
            continue;
        }
        ctx.tally.ops.fetch_add(1, Ordering::Relaxed);
        let labels = labels(id, op.ranges.len());
        let limit = match op.cancel {
            Cancel::No => ctx.lost_timeout,
            Cancel::Now => Duration::ZERO,
            Cancel::After(d) => d,
        };
        let t0 = Instant::now();
        if op.dest == Dest::Bytes && op.bad.is_none() {
            let (off, len, _) = op.ranges[0];
            let engine = Arc::clone(&ctx.engine);
            ctx.submitted.fetch_add(1, Ordering::Relaxed);
            match tokio::time::timeout(limit, engine.read_bytes_async(off, len)).await {
                Ok(Ok(b)) => {
                    let mut first = None;
                    let w = ctx.expect.count_wrong(off, &b, &mut s.expect, &mut first);
                    ctx.tally.wrong(w, first);
                    ctx.tally.latency(t0.elapsed());
                    ctx.tally.ok.fetch_add(1, Ordering::Relaxed);
                    ctx.tally
                        .bytes_verified
                        .fetch_add(len as u64, Ordering::Relaxed);
                }
                Ok(Err(e)) => failed(&ctx, ctx.source_id, &op, &[], &e),
                Err(_) => timed_out(&ctx, &op),
            }
            continue;
        }
        let reuse = op.bad.is_none();
        let dst = match ctx.poisoned(op.dest, op.dest_len, reuse, &mut s) {
            Ok(d) => d,
            Err(e) => {
                ctx.tally
                    .unexpected(format!("destination of {} bytes: {e}", op.dest_len));
                continue;
            }
        };
        let r = ctx.engine.submit(requests(&op, &dst, &labels));
        if op.bad.is_some() {
            check_bad(&ctx, &op, r);
            continue;
        }
        let ticket = match r {
            Ok(t) => t,
            Err(e) => {
                ctx.tally
                    .unexpected(format!("submit of a valid {} read: {}", op.kind, chain(&e)));
                continue;
            }
        };
        ctx.submitted.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout(limit, ticket).await {
            Ok(Ok(())) => succeeded(&ctx, &op, &dst, t0, &mut s),
            Ok(Err(e)) => failed(&ctx, ctx.source_id, &op, &labels, &e),
            Err(_) => timed_out(&ctx, &op),
        }
        s.recycle(op.dest, dst);
    }
}

/// A timeout fired: a cancellation when one was planned, otherwise a lost request.
fn timed_out(ctx: &Ctx, op: &Op) {
    if op.cancel == Cancel::No {
        ctx.tally.lost.fetch_add(1, Ordering::Relaxed);
    } else {
        ctx.tally.cancelled.fetch_add(1, Ordering::Relaxed);
    }
    ctx.tally
        .unobserved(ctx.source_id, op.ranges.iter().map(|r| (r.0, r.1 as u64)));
}
