//! Loom model check of the engine's staging-slot hand-off and ticket completion (run with
//! `RUSTFLAGS="--cfg ds4_loom" cargo test --release --test loom_staging`; .ci/stress.sh does).
//!
//! The engine itself cannot run under loom (crossbeam channels, std threads and the reader
//! pool are not loom-instrumented), so this is a faithful model of the protocol as
//! src/engine/pipeline.rs, src/engine/request.rs and src/device/{buffer,host}.rs implement it:
//!
//! - the free ring, the job queue, the copy stream and the completer queue are FIFO channels
//!   (modelled as loom Mutex + Condvar queues: a send happens-before the matching receive,
//!   which is what crossbeam guarantees);
//! - a staging slot (`PinnedBuf`) owns its bytes and the event of its last copy; host writes
//!   (`as_mut_slice`) wait for that event first, and the completer waits it before returning
//!   the slot to the ring (two independent protections);
//! - the copy "thread" reads the slot's bytes through a raw pointer while the slot itself has
//!   moved on to the completer, then sets the event (HostEvent: Mutex + Condvar);
//! - a request's chunks count down an `AtomicU64` with `fetch_sub(AcqRel)`; the last one
//!   finalises: error taken under a mutex, `Completion::complete` sets `done` under the lock,
//!   takes the waker, notifies the condvar, wakes the waker; `Ticket::wait` loops on the
//!   condvar, `Ticket::poll` registers its waker under the same lock; a `ChunkToken` dropped
//!   unfinished finishes itself with an error.
//!
//! What loom proves over every interleaving (within the preemption bound): the slot's bytes
//! are never written while a copy may still read them (loom's `UnsafeCell` reports any access
//! not ordered by happens-before: "slot reuse before its copy completed"), the destination
//! bytes a waiter reads after completion were all written before (no torn result), every
//! request completes exactly once (no double completion, none lost), and a waiter blocked on
//! the condvar or parked in `block_on` is always woken (loom reports a deadlock otherwise: a
//! lost wake-up). Two mutants show the check has teeth: `buggy_slot_reuse_is_caught` removes
//! both slot protections, `completion_before_the_copy_is_caught` lets the completer finish a
//! chunk without waiting its copy; loom must (and does) fail both.
#![cfg(ds4_loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// A FIFO channel (crossbeam's ordering guarantee: send happens-before receive).
struct Chan<T> {
    q: Mutex<(VecDeque<T>, bool)>,
    cv: Condvar,
}

impl<T> Chan<T> {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            q: Mutex::new((VecDeque::new(), false)),
            cv: Condvar::new(),
        })
    }
    fn send(&self, v: T) {
        self.q.lock().unwrap().0.push_back(v);
        self.cv.notify_all();
    }
    fn close(&self) {
        self.q.lock().unwrap().1 = true;
        self.cv.notify_all();
    }
    /// `None` once closed and drained.
    fn recv(&self) -> Option<T> {
        let mut g = self.q.lock().unwrap();
        loop {
            if let Some(v) = g.0.pop_front() {
                return Some(v);
            }
            if g.1 {
                return None;
            }
            g = self.cv.wait(g).unwrap();
        }
    }
}

/// HostEvent: pending until the copy thread sets it.
struct Event {
    done: Mutex<bool>,
    cv: Condvar,
}

impl Event {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            done: Mutex::new(false),
            cv: Condvar::new(),
        })
    }
    fn set(&self) {
        *self.done.lock().unwrap() = true;
        self.cv.notify_all();
    }
    fn wait(&self) {
        let mut d = self.done.lock().unwrap();
        while !*d {
            d = self.cv.wait(d).unwrap();
        }
    }
}

/// A staging slot: its bytes (shared with copies in flight through a raw pointer in the real
/// code, an `Arc` here) and the event of its last copy.
struct Slot {
    bytes: Arc<UnsafeCell<u64>>,
    last: Option<Arc<Event>>,
}

impl Slot {
    /// `PinnedBuf::as_mut_slice`: waits for the last copy, then hands out the bytes.
    fn write(&mut self, v: u64, wait_event: bool) {
        if wait_event {
            if let Some(ev) = self.last.take() {
                ev.wait();
            }
        }
        self.bytes.with_mut(|p| unsafe { *p = v });
    }
}

/// One copy on the stream: slot bytes -> destination cell, then the event.
struct Copy {
    src: Arc<UnsafeCell<u64>>,
    dst: Arc<UnsafeCell<u64>>,
    ev: Arc<Event>,
}

/// `Completion` + `RequestState` of one request.
struct Request {
    remaining: AtomicUsize,
    finalized: AtomicBool,
    /// The engine's `stats.request` count (bumped before the ticket completes).
    counted: AtomicUsize,
    error: Mutex<Option<&'static str>>,
    state: Mutex<(bool, Option<Result<(), &'static str>>, Option<Waker>)>,
    cv: Condvar,
    completions: AtomicUsize,
}

impl Request {
    fn new(chunks: usize) -> Arc<Self> {
        Arc::new(Self {
            remaining: AtomicUsize::new(chunks),
            finalized: AtomicBool::new(false),
            counted: AtomicUsize::new(0),
            error: Mutex::new(None),
            state: Mutex::new((false, None, None)),
            cv: Condvar::new(),
            completions: AtomicUsize::new(0),
        })
    }

    /// `RequestState::finish_chunk` and `finalize`: the last chunk takes the error, claims
    /// the completion through the `finalized` flag (a second finaliser returns), counts the
    /// request in the stats, then completes the ticket.
    fn finish_chunk(&self, r: Result<(), &'static str>) {
        if let Err(e) = r {
            self.error.lock().unwrap().get_or_insert(e);
        }
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            let r = match self.error.lock().unwrap().take() {
                Some(e) => Err(e),
                None => Ok(()),
            };
            if self.finalized.swap(true, Ordering::AcqRel) {
                return;
            }
            self.counted.fetch_add(1, Ordering::Release);
            self.complete(r);
        }
    }

    /// `Completion::complete`: once only; wakes the condvar and the waker.
    fn complete(&self, r: Result<(), &'static str>) {
        let waker = {
            let mut st = self.state.lock().unwrap();
            if st.0 {
                return;
            }
            st.0 = true;
            st.1 = Some(r);
            st.2.take()
        };
        self.completions.fetch_add(1, Ordering::SeqCst);
        self.cv.notify_all();
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// `Ticket::wait`.
    fn wait(&self) -> Result<(), &'static str> {
        let mut st = self.state.lock().unwrap();
        while !st.0 {
            st = self.cv.wait(st).unwrap();
        }
        st.1.take().unwrap_or(Err("already taken"))
    }
}

/// `Ticket` as a future (`impl Future for Ticket`).
struct TicketFuture(Arc<Request>);

impl Future for TicketFuture {
    type Output = Result<(), &'static str>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut st = self.0.state.lock().unwrap();
        if st.0 {
            return Poll::Ready(st.1.take().unwrap_or(Err("already taken")));
        }
        match &mut st.2 {
            Some(w) if w.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

/// `ChunkToken`: finishing it is a duty; dropping it unfinished finishes it with an error.
struct Token {
    req: Option<Arc<Request>>,
}

impl Token {
    fn finish(mut self, r: Result<(), &'static str>) {
        if let Some(q) = self.req.take() {
            q.finish_chunk(r);
        }
    }
}

impl Drop for Token {
    fn drop(&mut self) {
        if let Some(q) = self.req.take() {
            q.finish_chunk(Err("lost"));
        }
    }
}

/// A job for the reader worker (`StagedJob`).
struct Job {
    slot: Slot,
    dst: Arc<UnsafeCell<u64>>,
    value: u64,
    token: Token,
    fail_read: bool,
}

/// What travels to the completer (`InFlight`).
struct InFlight {
    slot: Slot,
    token: Token,
}

/// Knobs for the model (the real engine is `Protections::ENGINE`).
#[derive(Clone, Copy)]
struct Protections {
    /// The completer waits the slot's event before returning it to the ring.
    completer_waits: bool,
    /// `as_mut_slice` waits the slot's last event before a host write.
    write_waits: bool,
}

impl Protections {
    const ENGINE: Self = Self {
        completer_waits: true,
        write_waits: true,
    };
}

/// How the submitter waits for its ticket.
#[derive(Clone, Copy, PartialEq)]
enum Wait {
    Blocking,
    Future,
}

/// Runs one request of `values.len()` chunks through a ring of `slots` slots with one reader
/// worker, the copy stream and the completer; chunk `fail` (if any) fails its read. Returns
/// the request's result and the destination cells as the waiter reads them after completion.
fn pipeline(
    values: &[u64],
    slots: usize,
    fail: Option<usize>,
    prot: Protections,
    wait: Wait,
    read_dst: bool,
) -> (Result<(), &'static str>, Vec<u64>) {
    let free: Arc<Chan<Slot>> = Chan::new();
    for _ in 0..slots {
        free.send(Slot {
            bytes: Arc::new(UnsafeCell::new(0)),
            last: None,
        });
    }
    let jobs: Arc<Chan<Job>> = Chan::new();
    let copies: Arc<Chan<Copy>> = Chan::new();
    let done: Arc<Chan<InFlight>> = Chan::new();
    let req = Request::new(values.len());
    let dsts: Vec<Arc<UnsafeCell<u64>>> = values
        .iter()
        .map(|_| Arc::new(UnsafeCell::new(0)))
        .collect();

    // Reader worker: read into the slot (waiting its last copy), queue the copy, record the
    // event in the slot, hand slot + token to the completer. A failed read finishes the token
    // with the error and returns the slot at once (SlotGuard's Drop).
    let worker = {
        let (jobs, copies, done, free) = (jobs.clone(), copies.clone(), done.clone(), free.clone());
        thread::spawn(move || {
            while let Some(mut j) = jobs.recv() {
                if j.fail_read {
                    if prot.write_waits {
                        if let Some(ev) = j.slot.last.take() {
                            ev.wait(); // as_mut_slice ran before the read failed
                        }
                    }
                    j.token.finish(Err("EIO"));
                    free.send(j.slot);
                    continue;
                }
                j.slot.write(j.value, prot.write_waits);
                let ev = Event::new();
                copies.send(Copy {
                    src: j.slot.bytes.clone(),
                    dst: j.dst.clone(),
                    ev: ev.clone(),
                });
                j.slot.last = Some(ev);
                done.send(InFlight {
                    slot: j.slot,
                    token: j.token,
                });
            }
            done.close();
        })
    };
    // Copy stream: in order; reads the slot bytes while the slot itself has moved on.
    let copier = {
        let copies = copies.clone();
        thread::spawn(move || {
            while let Some(c) = copies.recv() {
                let v = c.src.with(|p| unsafe { *p });
                c.dst.with_mut(|p| unsafe { *p = v });
                c.ev.set();
            }
        })
    };
    // Completer: waits the event, returns the slot to the ring, finishes the chunk.
    let completer = {
        let (done, free) = (done.clone(), free.clone());
        thread::spawn(move || {
            while let Some(mut f) = done.recv() {
                if prot.completer_waits {
                    if let Some(ev) = &f.slot.last {
                        ev.wait();
                    }
                }
                free.send(f.slot);
                f.token.finish(Ok(()));
            }
        })
    };
    // This thread is the dispatcher (takes a free slot per chunk, blocking) and then the
    // submitter waiting on its ticket.
    for (i, &v) in values.iter().enumerate() {
        let slot = free
            .recv()
            .expect("the ring is never closed while dispatching");
        jobs.send(Job {
            slot,
            dst: dsts[i].clone(),
            value: v,
            token: Token {
                req: Some(req.clone()),
            },
            fail_read: fail == Some(i),
        });
    }
    jobs.close();
    let r = match wait {
        Wait::Blocking => req.wait(),
        Wait::Future => loom::future::block_on(TicketFuture(req.clone())),
    };
    // A woken waiter sees its request counted (ds4-stress relies on the stats count).
    assert_eq!(req.counted.load(Ordering::Acquire), 1);
    // After completion the waiter may read every destination it asked for: all copies of ok
    // chunks must happen-before this (loom reports the read as a race otherwise).
    let got: Vec<u64> = if r.is_ok() && read_dst {
        dsts.iter().map(|d| d.with(|p| unsafe { *p })).collect()
    } else {
        Vec::new()
    };
    worker.join().unwrap();
    completer.join().unwrap();
    copies.close();
    copier.join().unwrap();
    assert_eq!(
        req.completions.load(Ordering::SeqCst),
        1,
        "a request must complete exactly once"
    );
    (r, got)
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    // Bounded preemptions keep the search under a minute in CI; 2 covers the orderings the
    // protocol depends on (one preemption on each side of a hand-off).
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    b.check(f);
}

#[test]
fn two_chunks_share_one_slot_blocking_wait() {
    model(|| {
        let (r, got) = pipeline(
            &[11, 22],
            1,
            None,
            Protections::ENGINE,
            Wait::Blocking,
            true,
        );
        assert_eq!(r, Ok(()));
        assert_eq!(got, vec![11, 22]);
    });
}

#[test]
fn two_chunks_share_one_slot_awaited_future() {
    model(|| {
        let (r, got) = pipeline(&[11, 22], 1, None, Protections::ENGINE, Wait::Future, true);
        assert_eq!(r, Ok(()));
        assert_eq!(got, vec![11, 22]);
    });
}

#[test]
fn failed_read_returns_its_slot_and_fails_the_request_once() {
    model(|| {
        let (r, _) = pipeline(
            &[11, 22],
            1,
            Some(0),
            Protections::ENGINE,
            Wait::Blocking,
            true,
        );
        assert_eq!(r, Err("EIO"));
    });
}

#[test]
fn completer_wait_alone_is_enough() {
    // Without the wait in `as_mut_slice`, the completer's wait still keeps the slot out of
    // the ring until its copy is over.
    model(|| {
        let prot = Protections {
            completer_waits: true,
            write_waits: false,
        };
        let (r, got) = pipeline(&[11, 22], 1, None, prot, Wait::Blocking, true);
        assert_eq!(r, Ok(()));
        assert_eq!(got, vec![11, 22]);
    });
}

#[test]
fn write_wait_alone_protects_the_slot() {
    // Without the completer's wait, `as_mut_slice` still keeps the next read off the slot
    // until the copy is over (the destination is not read here: see the next test).
    model(|| {
        let prot = Protections {
            completer_waits: false,
            write_waits: true,
        };
        let (r, _) = pipeline(&[11, 22], 1, None, prot, Wait::Blocking, false);
        assert_eq!(r, Ok(()));
    });
}

#[test]
#[should_panic(expected = "Causality violation")]
fn completion_before_the_copy_is_caught() {
    // ... but then a ticket could complete before its bytes arrived: the waiter's read of the
    // destination races with the copy. The completer's wait is what makes "Ok" mean "here".
    model(|| {
        let prot = Protections {
            completer_waits: false,
            write_waits: true,
        };
        let _ = pipeline(&[11, 22], 1, None, prot, Wait::Blocking, true);
    });
}

#[test]
#[should_panic(expected = "Causality violation")]
fn buggy_slot_reuse_is_caught() {
    // Neither the completer nor the writer waits the copy's event: the second chunk's read
    // can overwrite the slot while the first copy still reads it. Loom must find it.
    model(|| {
        let prot = Protections {
            completer_waits: false,
            write_waits: false,
        };
        let _ = pipeline(&[11, 22], 1, None, prot, Wait::Blocking, false);
    });
}

#[test]
fn dropped_token_and_finish_race_complete_exactly_once() {
    // One chunk finishes normally while another's token is dropped unfinished (a cancelled
    // job, a panicking worker): one completion, with the error, whoever comes last.
    model(|| {
        let req = Request::new(2);
        let a = Token {
            req: Some(req.clone()),
        };
        let b = Token {
            req: Some(req.clone()),
        };
        let t = thread::spawn(move || drop(b));
        a.finish(Ok(()));
        let r = loom::future::block_on(TicketFuture(req.clone()));
        t.join().unwrap();
        assert_eq!(r, Err("lost"));
        assert_eq!(req.completions.load(Ordering::SeqCst), 1);
    });
}
