//! How many requests a cold sequential copy keeps in flight, chosen by measuring the disk.
//!
//! Disks disagree: the dev machine's virtio disk reads a cold tensor fastest with two 4 MiB
//! requests in flight (three or more lose a fifth: docs/BENCHMARKS.md, issue 18), while the
//! H200 machine's wants a deep queue (fio's best there is libaio at depth 32). No static shape
//! serves both, and neither says what it is (both report `rotational`, one hardware queue).
//!
//! [`DepthTuner`] climbs: it runs one epoch (a fixed number of bytes written out) at each depth
//! of [`STEPS`] up to the copy's window, and moves up only while a step is faster than the best
//! so far by [`GAIN`]; the first step that is not, or the last, ends the climb, and the copy goes
//! on at the best depth seen. Limits: one climb per copy (a disk that changes its mind in the
//! middle of a long copy is not followed); a single noisy epoch can end the climb early.

use std::time::Duration;

/// Depths tried, in order (capped by the copy's window).
pub const STEPS: [usize; 5] = [2, 4, 8, 16, 24];
/// How much faster a depth must be than the best below it to keep climbing.
pub const GAIN: f64 = 1.08;

/// The depth a copy runs at now, and what it measured.
#[derive(Clone, Debug)]
pub struct DepthTuner {
    steps: Vec<usize>,
    /// Index into `steps` of the depth in use.
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
    /// A climb over [`STEPS`] capped at `max_window` (at least 1), measuring `epoch_bytes`
    /// (at least 1) per step.
    pub fn new(max_window: usize, epoch_bytes: u64) -> Self {
        let max = max_window.max(1);
        let mut steps: Vec<usize> = STEPS.iter().copied().filter(|&s| s < max).collect();
        steps.push(max);
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

    /// Requests to keep in flight now.
    pub fn window(&self) -> usize {
        self.steps[self.at]
    }

    /// Whether the climb is over.
    pub fn settled(&self) -> bool {
        self.settled
    }

    /// (depth, bytes/s) of each epoch measured, in order.
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
        self.probes.push((self.window(), rate));
        let better = self.best.is_none_or(|(_, b)| rate > b * GAIN);
        if better {
            self.best = Some((self.at, rate));
        }
        if better && self.at + 1 < self.steps.len() {
            self.at += 1;
            self.got = 0;
            self.since = now;
        } else {
            // `best` is set by the first epoch, so this is the fastest depth measured.
            self.at = self.best.map_or(self.at, |(i, _)| i);
            self.settled = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a tuner against a disk whose rate (bytes/s) depends on the depth only, 4 MiB
    /// writes, until it settles; returns the depth it settled at and the probes.
    fn climb(max: usize, rate: impl Fn(usize) -> f64) -> (usize, Vec<usize>) {
        let mut t = DepthTuner::new(max, 16 << 20);
        // The first write only starts the clock, whatever it took.
        let mut now = Duration::from_secs(5);
        t.written(4 << 20, now);
        for _ in 0..1000 {
            if t.settled() {
                break;
            }
            now += Duration::from_secs_f64((4 << 20) as f64 / rate(t.window()));
            t.written(4 << 20, now);
        }
        assert!(t.settled());
        (t.window(), t.probes().iter().map(|p| p.0).collect())
    }

    #[test]
    fn a_disk_that_wants_two_requests_gets_two() {
        // The dev machine's disk: 2.0 GB/s at depth 2, 1.6 beyond.
        let (d, probes) = climb(24, |d| if d <= 2 { 2.0e9 } else { 1.6e9 });
        assert_eq!((d, probes), (2, vec![2, 4]));
    }

    #[test]
    fn a_deep_queue_disk_climbs_to_the_top() {
        let (d, probes) = climb(24, |d| 0.3e9 * d as f64);
        assert_eq!((d, probes), (24, vec![2, 4, 8, 16, 24]));
    }

    #[test]
    fn the_climb_stops_at_the_knee_and_a_small_gain_is_not_a_step() {
        // Doubles to 8, +5 % at 16 (under GAIN): stays at 8.
        let (d, probes) = climb(24, |d| match d {
            2 => 1.0e9,
            4 => 2.0e9,
            8 => 4.0e9,
            _ => 4.2e9,
        });
        assert_eq!((d, probes), (8, vec![2, 4, 8, 16]));
        // Slower again at 16 after a peak at 4: back to 4.
        let (d, _) = climb(24, |d| match d {
            4 => 3.0e9,
            _ => 1.0e9,
        });
        assert_eq!(d, 4);
    }

    #[test]
    fn the_window_caps_the_steps() {
        let (d, probes) = climb(6, |d| 1e9 * d as f64);
        assert_eq!((d, probes), (6, vec![2, 4, 6]));
        // A window of 1 or 2 has nothing to try.
        for w in [0, 1, 2] {
            let t = DepthTuner::new(w, 1);
            assert!(t.settled());
            assert_eq!(t.window(), w.max(1));
        }
    }

    #[test]
    fn an_epoch_is_timed_from_the_step_it_measures() {
        // 16 MiB per epoch; the first epoch takes 1 s, the second 0.5 s (twice as fast).
        let mut t = DepthTuner::new(4, 16 << 20);
        t.written(4 << 20, Duration::ZERO);
        t.written(16 << 20, Duration::from_secs(1));
        assert_eq!(t.window(), 4);
        t.written(16 << 20, Duration::from_millis(1500));
        let r: Vec<f64> = t.probes().iter().map(|p| p.1).collect();
        assert_eq!(r, vec![(16u64 << 20) as f64, (32u64 << 20) as f64]);
        assert!(t.settled());
        assert_eq!(t.window(), 4);
    }
}
