//! The file a benchmark reads, the destination it reads into, and the byte check.
//!
//! - [`TestFile::create`] writes a patterned file (`ds4_io::pattern`: every 8-byte word holds its
//!   own offset xor a seed) and removes it on drop; `--file` uses an existing file instead.
//! - [`Verifier`] checks a sample of a run's destination: against the pattern when the file is
//!   patterned (detected from its bytes), else against a plain positional read of the file.
//! - [`HostDest`] is page-aligned, pre-faulted host memory that several threads write disjoint
//!   ranges of (the baselines' destination; the engine cases use a device buffer).
//!
//! The temp file (`ds4-bench-PID-NONCE.bin` in `--dir`) is removed on drop and on SIGINT /
//! SIGTERM; one left by a killed (SIGKILL) run is swept by the next run in that directory.

use super::plan::{Plan, SplitMix};
use super::BenchError;
use ds4_io::pattern;
use ds4_io::AlignedBuf;
use ds4_stream::units::human_bytes;
use ds4_tools::cli::files;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The file under test; removed on drop when we created it.
pub struct TestFile {
    pub path: PathBuf,
    pub len: u64,
    /// Pattern seed when the file holds `ds4_io::pattern` bytes.
    pub seed: Option<u64>,
    /// Set when we created the file: removes it on drop (and on SIGINT / SIGTERM).
    _temp: Option<files::Temp>,
}

impl TestFile {
    /// Writes `len` pattern bytes to a new file in `dir` (fsynced, so its pages are clean and
    /// can be dropped from the page cache for cold runs).
    pub fn create(dir: &Path, len: u64, progress: bool) -> Result<TestFile, BenchError> {
        if len == 0 {
            return Err(BenchError::usage("--size must be > 0"));
        }
        if let Some(avail) = free_space(dir) {
            // Keep 1 GiB spare so the benchmark never fills the disk.
            if len.saturating_add(1 << 30) > avail {
                return Err(BenchError::usage(format!(
                    "--size {} does not fit in {} ({} free, 1 GiB kept spare)",
                    human_bytes(len),
                    dir.display(),
                    human_bytes(avail)
                )));
            }
        }
        let nonce = SplitMix(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0)
                ^ u64::from(std::process::id()),
        )
        .next_u64();
        // Files of earlier runs that were killed (their PID is gone); ours is registered so that
        // SIGINT / SIGTERM removes it.
        files::sweep_stale(dir, |n| {
            files::pid_after(n, "ds4-bench-", Some('-')).filter(|_| n.ends_with(".bin"))
        });
        let path = dir.join(format!("ds4-bench-{}-{nonce:016x}.bin", std::process::id()));
        let seed = nonce | 1; // never 0, so an all-zero page cannot pass as pattern
        let tf = TestFile {
            path: path.clone(),
            len,
            seed: Some(seed),
            _temp: Some(files::Temp::register(path)),
        };
        let mut f = File::create_new(&tf.path).map_err(|e| BenchError::Io {
            what: "create test file",
            path: tf.path.clone(),
            offset: 0,
            len,
            source: e,
        })?;
        let bar = super::progress_bar(len, "writing test file", progress);
        let mut buf = vec![0u8; 8 << 20];
        let mut off = 0u64;
        while off < len {
            let n = (len - off).min(buf.len() as u64) as usize;
            pattern::fill(seed, off, &mut buf[..n]);
            f.write_all(&buf[..n]).map_err(|e| BenchError::Io {
                what: "write test file",
                path: tf.path.clone(),
                offset: off,
                len: n as u64,
                source: e,
            })?;
            off += n as u64;
            bar.set_position(off);
        }
        f.sync_all().map_err(|e| BenchError::Io {
            what: "fsync test file",
            path: tf.path.clone(),
            offset: 0,
            len,
            source: e,
        })?;
        bar.finish_and_clear();
        Ok(tf)
    }

    /// Uses an existing file; detects whether it holds pattern bytes.
    pub fn existing(path: &Path) -> Result<TestFile, BenchError> {
        let f = File::open(path).map_err(|e| {
            BenchError::BadInput(format!("cannot open --file {}: {e}", path.display()))
        })?;
        let len = f
            .metadata()
            .map_err(|e| BenchError::BadInput(format!("cannot stat {}: {e}", path.display())))?
            .len();
        if len == 0 {
            return Err(BenchError::BadInput(format!(
                "--file {} is empty",
                path.display()
            )));
        }
        let seed = detect_pattern(&f, len);
        Ok(TestFile {
            path: path.to_path_buf(),
            len,
            seed,
            _temp: None,
        })
    }

    /// The checker for this file.
    pub fn verifier(&self) -> Result<Verifier, BenchError> {
        match self.seed {
            Some(seed) => Ok(Verifier::Pattern { seed }),
            None => Ok(Verifier::Reference {
                file: File::open(&self.path).map_err(|e| BenchError::Io {
                    what: "open file for verification",
                    path: self.path.clone(),
                    offset: 0,
                    len: 0,
                    source: e,
                })?,
                path: self.path.clone(),
            }),
        }
    }
}

/// Pattern seed of a file whose first words and a few later words all decode to the same seed.
fn detect_pattern(f: &File, len: u64) -> Option<u64> {
    if len < 64 {
        return None;
    }
    let mut w = [0u8; 8];
    read_at(f, &mut w, 0).ok()?;
    let seed = u64::from_le_bytes(w);
    let probes = [8, 16, 4096, len / 3, len / 2, len - 8];
    for p in probes {
        let p = p & !7;
        if p + 8 > len {
            continue;
        }
        read_at(f, &mut w, p).ok()?;
        if u64::from_le_bytes(w) != p ^ seed {
            return None;
        }
    }
    Some(seed)
}

fn read_at(f: &File, buf: &mut [u8], off: u64) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_exact_at(f, buf, off)
    }
    #[cfg(windows)]
    {
        let mut done = 0;
        while done < buf.len() {
            let n =
                std::os::windows::fs::FileExt::seek_read(f, &mut buf[done..], off + done as u64)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            done += n;
        }
        Ok(())
    }
}

/// Free bytes on the filesystem holding `dir` (None where unknown).
fn free_space(dir: &Path) -> Option<u64> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
        // SAFETY: statvfs is plain data; zeroed is a valid value for it.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is a valid NUL-terminated path and `st` a valid out-pointer for the call.
        if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
            return None;
        }
        Some(st.f_bavail as u64 * st.f_frsize as u64)
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        None
    }
}

/// Copies destination bytes at an offset out of the destination (host or device memory).
pub type ReadDest<'a> = dyn FnMut(u64, &mut [u8]) -> Result<(), BenchError> + 'a;

/// Checks what a run left in its destination.
pub enum Verifier {
    /// The file holds `ds4_io::pattern` bytes with this seed.
    Pattern { seed: u64 },
    /// Any file: expected bytes come from a plain positional read.
    Reference { file: File, path: PathBuf },
}

impl Verifier {
    fn expected(&self, file_off: u64, out: &mut [u8]) -> Result<(), BenchError> {
        match self {
            Verifier::Pattern { seed } => {
                pattern::fill(*seed, file_off, out);
                Ok(())
            }
            Verifier::Reference { file, path } => {
                read_at(file, out, file_off).map_err(|e| BenchError::Io {
                    what: "reference read for verification",
                    path: path.clone(),
                    offset: file_off,
                    len: out.len() as u64,
                    source: e,
                })
            }
        }
    }

    /// Checks a sample of the destination against what `plan` says it must hold: the first and
    /// last 4 KiB of every final segment, one 8-byte word every 64 KiB of every segment, and
    /// up to 4 whole segments (8 MiB each at most) picked at random. Returns bytes checked.
    ///
    /// `read_dest(off, out)` copies destination bytes out (host memory or a device buffer).
    pub fn check(
        &self,
        plan: &Plan,
        case: &str,
        seed: u64,
        read_dest: &mut ReadDest<'_>,
    ) -> Result<u64, BenchError> {
        let segs = plan.final_segments();
        let mut checked = 0u64;
        let mut want = Vec::new();
        let mut got = Vec::new();
        let mut probe = |off_in_seg: u64, len: u64, s: &super::plan::Request| {
            let len = len.min(s.len - off_in_seg) as usize;
            want.resize(len, 0);
            got.resize(len, 0);
            self.expected(s.file_off + off_in_seg, &mut want)?;
            read_dest(s.dest_off + off_in_seg, &mut got)?;
            if want != got {
                let i = want.iter().zip(&got).position(|(a, b)| a != b).unwrap_or(0);
                return Err(BenchError::Verify(format!(
                    "case {case}: destination byte {} should hold file byte {} = {:#04x}, holds {:#04x}",
                    s.dest_off + off_in_seg + i as u64,
                    s.file_off + off_in_seg + i as u64,
                    want[i],
                    got[i]
                )));
            }
            checked += len as u64;
            Ok::<(), BenchError>(())
        };
        for s in &segs {
            probe(0, 4096, s)?;
            probe(s.len.saturating_sub(4096), 4096, s)?;
            let mut o = 65536;
            while o + 8 <= s.len {
                probe(o, 8, s)?;
                o += 65536;
            }
        }
        let mut rng = SplitMix(seed);
        for _ in 0..segs.len().min(4) {
            let s = &segs[rng.below(segs.len() as u64) as usize];
            let max = 8u64 << 20;
            let start = if s.len > max {
                rng.below(s.len - max + 1)
            } else {
                0
            };
            probe(start, max, s)?;
        }
        if checked == 0 {
            return Err(BenchError::Verify(format!(
                "case {case}: nothing to verify"
            )));
        }
        Ok(checked)
    }
}

/// Page-aligned, pre-faulted host memory written by several threads at disjoint ranges.
pub struct HostDest {
    buf: AlignedBuf,
}

impl HostDest {
    /// Allocates `len` bytes (4 KiB aligned) and touches every page, so page faults are not
    /// timed as reads.
    pub fn new(len: u64) -> Result<HostDest, BenchError> {
        let n = usize::try_from(len)
            .map_err(|_| BenchError::usage(format!("destination of {len} bytes is too large")))?;
        let mut buf = AlignedBuf::new(n, 4096).ok_or_else(|| {
            BenchError::Runtime(format!(
                "cannot allocate {} of destination memory",
                human_bytes(len)
            ))
        })?;
        buf.fill(0x5a);
        Ok(HostDest { buf })
    }

    pub fn len(&self) -> u64 {
        self.buf.len() as u64
    }

    /// Overwrites `[0, len)` with a poison byte, so a run that writes nothing cannot pass
    /// verification on the bytes a previous run left.
    pub fn poison(&mut self, len: u64) {
        let n = (len as usize).min(self.buf.len());
        self.buf[..n].fill(0xa5);
    }

    /// Flips one byte the verifier is sure to look at (the first byte of the first final
    /// segment): the self-test behind `--inject-corruption`.
    pub fn corrupt_one_byte(&mut self, plan: &Plan) {
        if let Some(s) = plan.final_segments().first() {
            if let Some(b) = self.buf.get_mut(s.dest_off as usize) {
                *b ^= 0x01;
            }
        }
    }

    /// A raw view for writer threads, borrowing the destination mutably for its lifetime.
    pub fn ptr(&mut self) -> DestPtr<'_> {
        DestPtr {
            ptr: self.buf.as_mut_ptr(),
            len: self.buf.len() as u64,
            _dest: std::marker::PhantomData,
        }
    }

    /// Copies destination bytes out (for verification).
    pub fn read(&self, off: u64, out: &mut [u8]) -> Result<(), BenchError> {
        let end = off
            .checked_add(out.len() as u64)
            .filter(|&e| e <= self.len())
            .ok_or_else(|| {
                BenchError::Runtime(format!("read of destination past {}", self.len()))
            })?;
        out.copy_from_slice(&self.buf[off as usize..end as usize]);
        Ok(())
    }
}

/// A raw pointer into a [`HostDest`] that writer threads share.
///
/// Soundness rests on the plan: [`Plan::check`] proves requests of one batch never overlap in
/// the destination, and a case finishes one batch before the next begins, so no two threads
/// ever touch the same bytes at once. The owning `HostDest` is borrowed mutably for the whole run
/// (the `DestPtr` holds the `&'d mut HostDest` borrow, so the destination outlives every slice
/// handed out, and nothing else can read it meanwhile).
#[derive(Clone, Copy)]
pub struct DestPtr<'d> {
    ptr: *mut u8,
    len: u64,
    _dest: std::marker::PhantomData<&'d mut HostDest>,
}

// SAFETY: see the type's doc: disjoint ranges per thread, lifetime bounded by the borrow.
unsafe impl Send for DestPtr<'_> {}
// SAFETY: as above.
unsafe impl Sync for DestPtr<'_> {}

impl<'d> DestPtr<'d> {
    /// The destination bytes `[off, off + len)`, for at most as long as the destination is
    /// borrowed.
    ///
    /// # Safety
    /// No other live reference may cover any of these bytes while the returned slice lives.
    pub unsafe fn slice_mut(&self, off: u64, len: u64) -> Result<&'d mut [u8], BenchError> {
        match off.checked_add(len) {
            Some(e) if e <= self.len => {
                // SAFETY: in bounds (checked above); exclusivity is the caller's contract.
                Ok(unsafe {
                    std::slice::from_raw_parts_mut(self.ptr.add(off as usize), len as usize)
                })
            }
            _ => Err(BenchError::Runtime(format!(
                "destination range {off}+{len} outside {} bytes",
                self.len
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::EXPERT_BYTES;

    /// Writes what `plan` says into a HostDest, reading from `file_bytes`.
    fn deliver(plan: &Plan, file_bytes: &[u8], dest: &mut HostDest) {
        dest.poison(plan.dest_len);
        let p = dest.ptr();
        for r in plan.batches.iter().flatten() {
            // SAFETY: single thread, range checked by slice_mut.
            let d = unsafe { p.slice_mut(r.dest_off, r.len) }.unwrap();
            d.copy_from_slice(&file_bytes[r.file_off as usize..(r.file_off + r.len) as usize]);
        }
    }

    #[test]
    fn pattern_file_detected_and_verified() {
        let dir = tempfile::tempdir().unwrap();
        let tf = TestFile::create(dir.path(), 13 * EXPERT_BYTES, false).unwrap();
        let path = tf.path.clone();
        let bytes = std::fs::read(&path).unwrap();
        let again = TestFile::existing(&path).unwrap();
        assert_eq!(again.seed, tf.seed);
        let plan = Plan::expert(tf.len, tf.len, 8 * EXPERT_BYTES, 3).unwrap();
        let mut dest = HostDest::new(plan.dest_len).unwrap();
        deliver(&plan, &bytes, &mut dest);
        let v = tf.verifier().unwrap();
        let n = v.check(&plan, "t", 1, &mut |o, b| dest.read(o, b)).unwrap();
        assert!(n > 8192);
        // A slice read from the wrong expert is caught.
        let mut wrong = plan.clone();
        let r = &mut wrong.batches[1][4];
        r.file_off =
            (r.file_off / EXPERT_BYTES + 1) % 13 * EXPERT_BYTES + r.file_off % EXPERT_BYTES;
        deliver(&wrong, &bytes, &mut dest);
        let e = v.check(&plan, "t", 1, &mut |o, b| dest.read(o, b));
        assert!(matches!(e, Err(BenchError::Verify(_))), "{e:?}");
        // A run that wrote nothing is caught (the poison stays).
        dest.poison(plan.dest_len);
        assert!(v.check(&plan, "t", 1, &mut |o, b| dest.read(o, b)).is_err());
        drop(tf);
        assert!(!path.exists(), "created file removed on drop");
    }

    #[test]
    fn plain_file_verified_by_reference() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plain");
        let bytes: Vec<u8> = (0..(20u32 << 20)).map(|i| (i % 253) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let tf = TestFile::existing(&path).unwrap();
        assert_eq!(tf.seed, None);
        let plan = Plan::seq(tf.len, tf.len, 8 << 20).unwrap();
        let mut dest = HostDest::new(plan.dest_len).unwrap();
        deliver(&plan, &bytes, &mut dest);
        let v = tf.verifier().unwrap();
        assert!(v.check(&plan, "t", 9, &mut |o, b| dest.read(o, b)).is_ok());
        // One byte off in the last lap.
        let mut b = [0u8; 1];
        dest.read(5 << 20, &mut b).unwrap();
        let p = dest.ptr();
        // SAFETY: single thread.
        unsafe { p.slice_mut(5 << 20, 1) }.unwrap()[0] = b[0] ^ 0x80;
        // Only a sample is checked; make sure this byte is in it by checking a 4 KiB head. After
        // laps [0,8) [8,16) [16,20) MiB, destination 5 MiB holds file byte 13 MiB.
        let mut plan1 = plan.clone();
        plan1.batches = vec![vec![crate::plan::Request {
            file_off: 13 << 20,
            len: 4096,
            dest_off: 5 << 20,
        }]];
        plan1.bytes = 4096;
        let e = v.check(&plan1, "t", 9, &mut |o, b| dest.read(o, b));
        assert!(
            matches!(e, Err(BenchError::Verify(ref m)) if m.contains("destination byte 5242880")),
            "{e:?}"
        );
        drop(tf);
        assert!(path.exists(), "--file is never removed");
    }
}
