//! Shutdown storms: every few seconds, start an extra engine on the same file (its own
//! fault-injecting source, so its start may fail on an injected open failure), submit
//! thousands of requests as fast as possible, wait a random moment (0-3 ms), and drop the
//! engine while they are in flight. The drop must return with every ticket completed: those
//! that say Ok must hold exactly the right bytes, the others must say `Shutdown` (or an
//! injected EIO); a ticket not complete after the drop is lost.

use super::client::{failed, plan, poisoned, verify_dest, Cancel, Ctx, Dest, Rng, Scratch};
use super::faults::{classify, ErrorKind};
use super::report::Tally;
use super::Starter;
use ds4_stream::engine::ReadRequest;
use ds4_stream::errors::chain;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) struct Storm {
    pub(crate) starter: Arc<Starter>,
    /// The main clients' context: tally, expected content, device, stop condition.
    pub(crate) ctx: Arc<Ctx>,
    pub(crate) every: Duration,
    pub(crate) requests: usize,
    pub(crate) seed: u64,
}

impl Storm {
    pub(crate) fn run(self) {
        let mut rng = Rng::new(self.seed);
        let mut s = Scratch::default();
        let mut next = Instant::now() + self.every / 2;
        while self.ctx.work.active() {
            if Instant::now() < next {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            next = Instant::now() + self.every;
            self.one(&mut rng, &mut s);
        }
    }

    fn one(&self, rng: &mut Rng, s: &mut Scratch) {
        let ctx = &self.ctx;
        let tally: &Tally = &ctx.tally;
        let Ok((engine, source)) = self.starter.start(tally) else {
            return; // counted as unexpected by the starter
        };
        tally.storms.fetch_add(1, Ordering::Relaxed);
        let file_len = ctx.expect.len();
        // Prepare every destination first (poisoning is the slow part), then submit them all
        // in a burst, so that most are still in flight when the engine is dropped.
        let mut prepared = Vec::with_capacity(self.requests);
        for i in 0..self.requests {
            // Small and medium reads only: thousands of them must fit in memory at once.
            let mut op = plan(rng, file_len, 0, 8 << 20, false);
            if op.bad.is_some() || op.bytes() > 4 << 20 {
                continue;
            }
            op.cancel = Cancel::No;
            if rng.below(4) != 0 {
                op.dest = Dest::Host; // poisoning host memory is cheap; device needs copies
            }
            let dst = match poisoned(ctx.device.as_ref(), op.dest, op.dest_len, false, s) {
                Ok(d) => d,
                Err(e) => {
                    tally.unexpected(format!("storm destination: {e}"));
                    continue;
                }
            };
            let labels: Vec<Arc<str>> = (0..op.ranges.len())
                .map(|k| Arc::from(format!("storm{i}/{k}")))
                .collect();
            prepared.push((op, labels, dst));
        }
        let mut inflight = Vec::with_capacity(prepared.len());
        for (op, labels, dst) in prepared {
            let reqs = op
                .ranges
                .iter()
                .zip(&labels)
                .map(|(&(off, len, d), l)| {
                    ReadRequest::new(off, len, Arc::clone(&dst), d).with_label(Arc::clone(l))
                })
                .collect();
            match engine.submit(reqs) {
                Ok(t) => inflight.push((op, labels, dst, t)),
                Err(e) => tally.unexpected(format!("storm submit: {}", chain(&e))),
            }
        }
        std::thread::sleep(Duration::from_micros(rng.below(3000)));
        let pending = inflight.iter().filter(|x| !x.3.is_done()).count() as u64;
        Tally::max(&tally.storm_max_inflight, pending);
        let t0 = Instant::now();
        drop(engine);
        Tally::max(
            &tally.storm_drop_max_us,
            u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX),
        );
        tally
            .storm_requests
            .fetch_add(inflight.len() as u64, Ordering::Relaxed);
        for (op, labels, dst, t) in inflight {
            tally.ops.fetch_add(1, Ordering::Relaxed);
            if !t.is_done() {
                tally.lost.fetch_add(1, Ordering::Relaxed);
                tally.unexpected("a ticket was still pending after its engine was dropped".into());
                continue;
            }
            match t.wait() {
                Ok(()) => {
                    let mut wrong = 0;
                    let mut first = None;
                    for &(off, len, d) in &op.ranges {
                        let (w, f) =
                            verify_dest(ctx, &dst, d, off, len, &mut s.expect, &mut s.readback);
                        wrong += w;
                        first = first.or(f);
                    }
                    tally.wrong(wrong, first);
                    tally.ok.fetch_add(1, Ordering::Relaxed);
                    tally
                        .bytes_verified
                        .fetch_add(op.bytes(), Ordering::Relaxed);
                }
                Err(e) if classify(&e).0 == ErrorKind::Shutdown => {
                    tally.error(ErrorKind::Shutdown);
                    tally.unobserved(source, op.ranges.iter().map(|r| (r.0, r.1 as u64)));
                }
                Err(e) => failed(ctx, source, &op, &labels, &e),
            }
        }
    }
}
