//! How many reads a cold sequential copy keeps in flight, chosen by measuring the disk.
//!
//! Disks disagree: the dev machine's virtio disk reads a cold tensor fastest with one read in
//! flight and the next requests queued behind it (~1.4x sixteen readers at two requests in
//! flight: docs/BENCHMARKS.md, issue 18), while the H200 machine's has wanted a deep queue
//! (fio's best there has been libaio at depth 32) and NVMe drives need one. No static shape
//! serves all, and none says what it is (both VMs report `rotational`, one hardware queue).
//!
//! [`DepthTuner`] climbs: it runs one epoch (a fixed number of bytes written out) at each reader
//! count of [`STEPS`] up to the copy's, each with [`window_for`] requests queued so a reader
//! never waits between reads, and moves up only while a step is faster than the best so far by
//! [`GAIN`]; the first step that is not, or the last, ends the climb, and the copy goes on at
//! the best step seen. The copy applies a step's reader count through the engine's active
//! limit ([`crate::engine::Engine::set_active_readers`]). Limits: one climb per copy (a disk
//! that changes its mind in the middle of a long copy is not followed); a single noisy epoch
//! can end the climb early.

use std::time::Duration;

/// Reader counts tried, in order (capped by the copy's readers and window).
pub const STEPS: [usize; 5] = [1, 2, 4, 8, 16];
/// How much faster a step must be than the best below it to keep climbing. Well above the
/// dev disk's epoch-to-epoch noise (two readers against one: 0.83-1.06x in 15 bench probes,
/// yet a climb to 4 under load), well below what a queue-hungry disk gains per doubling (~2x).
pub const GAIN: f64 = 1.15;

/// Requests a step with `readers` readers keeps in flight (before the copy's window caps it):
/// two or half as many more than the readers, so each reader finds its next request queued.
/// 1 reader: 3; 2: 4; 4: 6; 8: 12; 16: 24.
pub fn window_for(readers: usize) -> usize {
    readers + (readers / 2).max(2)
}

/// One step of the climb.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// Readers reading at once.
    pub readers: usize,
    /// Requests in flight (queued or being read).
    pub window: usize,
}

/// The step a copy runs at now, and what it measured.
#[derive(Clone, Debug)]
pub struct DepthTuner {
    steps: Vec<Step>,
    /// Index into `steps` of the step in use.
    at: usize,
    /// (index, bytes/s) of the fastest epoch so far.
    best: Option<(usize, f64)>,
    epoch: u64,
    got: u64,
    since: Duration,
    settled: bool,
    /// Whether the first write (which carries the disk's start-up latency) has been seen.
    started: bool,
    probes: Vec<(usize, f64)>,
}

impl DepthTuner {
    /// A climb over [`STEPS`] capped at `max_readers` readers and `max_window` requests (each
    /// at least 1), measuring `epoch_bytes` (at least 1) per step.
    pub fn new(max_readers: usize, max_window: usize, epoch_bytes: u64) -> Self {
        let max_w = max_window.max(1);
        let max_r = max_readers.clamp(1, max_w);
        let mut readers: Vec<usize> = STEPS.iter().copied().filter(|&r| r < max_r).collect();
        readers.push(max_r);
        let steps: Vec<Step> = readers
            .into_iter()
            .map(|r| Step {
                readers: r,
                // r <= max_w and window_for(r) > r: never fewer requests than readers.
                window: window_for(r).min(max_w),
            })
            .collect();
        Self {
            settled: steps.len() == 1,
            steps,
            at: 0,
            best: None,
            epoch: epoch_bytes.max(1),
            got: 0,
            since: Duration::ZERO,
            started: false,
            probes: Vec::new(),
        }
    }

    /// The step in use now.
    pub fn step(&self) -> Step {
        self.steps[self.at]
    }

    /// Requests to keep in flight now.
    pub fn window(&self) -> usize {
        self.step().window
    }

    /// Readers to let read at once now.
    pub fn readers(&self) -> usize {
        self.step().readers
    }

    /// Whether the climb is over.
    pub fn settled(&self) -> bool {
        self.settled
    }

    /// (readers, bytes/s) of each epoch measured, in order.
    pub fn probes(&self) -> &[(usize, f64)] {
        &self.probes
    }

    /// `bytes` more were written out at `now` (time since the copy started). The first write
    /// only starts the clock: it carries the first request's latency, which on the dev disk
    /// made depth 2 look slower than 4 in a 16 MiB epoch when it is faster over the copy.
    pub fn written(&mut self, bytes: u64, now: Duration) {
        if self.settled {
            return;
        }
        if !self.started {
            self.started = true;
            self.since = now;
            return;
        }
        self.got += bytes;
        if self.got < self.epoch {
            return;
        }
        let secs = now.saturating_sub(self.since).as_secs_f64().max(1e-9);
        let rate = self.got as f64 / secs;
        self.probes.push((self.readers(), rate));
        let better = self.best.is_none_or(|(_, b)| rate > b * GAIN);
        if better {
            self.best = Some((self.at, rate));
        }
        if better && self.at + 1 < self.steps.len() {
            self.at += 1;
            self.got = 0;
            self.since = now;
        } else {
            // `best` is set by the first epoch, so this is the fastest step measured.
            self.at = self.best.map_or(self.at, |(i, _)| i);
            self.settled = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a tuner (16 readers, window 24) against a disk whose rate (bytes/s) depends on the
    /// readers only, 4 MiB writes, until it settles; returns the readers it settled at and the
    /// readers of each probe.
    fn climb(max: usize, rate: impl Fn(usize) -> f64) -> (usize, Vec<usize>) {
        let mut t = DepthTuner::new(max, 24, 16 << 20);
        // The first write only starts the clock, whatever it took.
        let mut now = Duration::from_secs(5);
        t.written(4 << 20, now);
        for _ in 0..1000 {
            if t.settled() {
                break;
            }
            now += Duration::from_secs_f64((4 << 20) as f64 / rate(t.readers()));
            t.written(4 << 20, now);
        }
        assert!(t.settled());
        (t.readers(), t.probes().iter().map(|p| p.0).collect())
    }

    #[test]
    fn a_disk_that_wants_one_reader_gets_one() {
        // The dev machine's disk: ~1.4 GB/s with one reader, ~1.1 with more.
        let (r, probes) = climb(16, |r| if r <= 1 { 1.4e9 } else { 1.1e9 });
        assert_eq!((r, probes), (1, vec![1, 2]));
    }

    #[test]
    fn a_deep_queue_disk_climbs_to_the_top() {
        let (r, probes) = climb(16, |r| 0.3e9 * r as f64);
        assert_eq!((r, probes), (16, vec![1, 2, 4, 8, 16]));
    }

    #[test]
    fn the_climb_stops_at_the_knee_and_a_small_gain_is_not_a_step() {
        // Doubles to 8, +5 % at 16 (under GAIN): stays at 8.
        let (r, probes) = climb(16, |r| match r {
            1 => 0.5e9,
            2 => 1.0e9,
            4 => 2.0e9,
            8 => 4.0e9,
            _ => 4.2e9,
        });
        assert_eq!((r, probes), (8, vec![1, 2, 4, 8, 16]));
        // Slower again at 8 after a peak at 4: back to 4.
        let (r, probes) = climb(16, |r| match r {
            1 => 1.0e9,
            2 => 2.0e9,
            4 => 3.0e9,
            _ => 1.5e9,
        });
        assert_eq!((r, probes), (4, vec![1, 2, 4, 8]));
    }

    #[test]
    fn each_step_queues_requests_beyond_its_readers() {
        let t = DepthTuner::new(16, 24, 1);
        let mut steps = vec![t.step()];
        let mut t = t;
        let mut now = Duration::ZERO;
        t.written(1, now);
        while !t.settled() {
            now += Duration::from_secs(1) / (steps.len() as u32 + 1) / 2;
            t.written(1, now);
            steps.push(t.step());
        }
        let got: Vec<(usize, usize)> = steps.iter().map(|s| (s.readers, s.window)).collect();
        assert_eq!(
            got,
            vec![(1, 3), (2, 4), (4, 6), (8, 12), (16, 24), (16, 24)]
        );
        for r in 1..64 {
            assert!(window_for(r) >= r + 2);
        }
    }

    #[test]
    fn the_readers_and_the_window_cap_the_steps() {
        let (r, probes) = climb(6, |r| 1e9 * r as f64);
        assert_eq!((r, probes), (6, vec![1, 2, 4, 6]));
        // A window of 4: readers above it add nothing, so the climb ends at 4 readers.
        let t = DepthTuner::new(16, 4, 1);
        assert_eq!(
            t.steps.last(),
            Some(&Step {
                readers: 4,
                window: 4
            })
        );
        assert_eq!(t.steps.len(), 3);
        // One reader or a window of 1 has nothing to try.
        for (r, w) in [(1, 24), (0, 24), (16, 1), (16, 0)] {
            let t = DepthTuner::new(r, w, 1);
            assert!(t.settled());
            assert_eq!(t.readers(), 1);
            assert!(t.window() >= 1);
        }
    }

    #[test]
    fn an_epoch_is_timed_from_the_step_it_measures() {
        // 16 MiB per epoch; the first epoch takes 1 s, the second 0.5 s (twice as fast).
        let mut t = DepthTuner::new(2, 4, 16 << 20);
        t.written(4 << 20, Duration::ZERO);
        t.written(16 << 20, Duration::from_secs(1));
        assert_eq!(t.readers(), 2);
        t.written(16 << 20, Duration::from_millis(1500));
        let r: Vec<f64> = t.probes().iter().map(|p| p.1).collect();
        assert_eq!(r, vec![(16u64 << 20) as f64, (32u64 << 20) as f64]);
        assert!(t.settled());
        assert_eq!(t.readers(), 2);
    }
}
