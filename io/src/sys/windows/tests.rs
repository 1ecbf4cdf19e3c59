//! Unit tests of the Windows reader (they run under Wine in CI).

use super::*;
use crate::pattern;
use windows::core::{HSTRING, PCWSTR};
use windows::Win32::Storage::FileSystem::{WriteFile, FILE_GENERIC_WRITE, OPEN_EXISTING};

/// A handle built by hand (as `open_handle` builds it) so a test can set its alignment and
/// timeout.
fn handle(path: &Path, align: DirectAlignment, timeout: Duration) -> WinHandle {
    let (shared, _) = SharedFile::open(path).unwrap();
    WinHandle {
        path: path.to_path_buf(),
        file: shared.reopen(FILE_FLAG_OVERLAPPED).unwrap(),
        event: new_event().unwrap(),
        direct: Direct::Ready {
            align,
            handle: None,
        },
        timeout,
        stats: HandleStats::default(),
    }
}

/// Forces the unbuffered handle onto a request Windows must refuse (alignment 1 claimed, odd
/// offset, odd address): the bytes still arrive, through the buffered handle, and the handle
/// records why. Wine does not enforce FILE_FLAG_NO_BUFFERING's alignment, so there the read may
/// succeed unbuffered instead; either way the bytes must be right.
#[test]
fn refused_unbuffered_read_falls_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.bin");
    let p = pattern::write_full(&path, 1 << 20).unwrap();
    let one = DirectAlignment {
        offset: 1,
        memory: 1,
    };
    let mut h = handle(&path, one, IO_TIMEOUT);
    let mut buf = vec![0u8; 4097];
    h.read_exact_at(&mut buf[1..], 3).unwrap();
    p.verify(3, &buf[1..]).unwrap();
    let s = h.stats();
    if s.direct_fallback.is_some() {
        assert!(
            !s.direct_active && s.counters.buffered_bytes == 4096,
            "{s:?}"
        );
    } else {
        assert_eq!(s.counters.direct_bytes, 4096, "{s:?}");
    }
}

/// Offset/length alignment is the logical sector size; address alignment the physical one,
/// capped at the page size: a volume reporting 64 KiB physical sectors keeps the unbuffered
/// path for 4096-aligned staging slots.
#[test]
fn sector_sizes_give_separate_offset_and_memory_alignment() {
    let a = |o, m| DirectAlignment {
        offset: o,
        memory: m,
    };
    assert_eq!(alignments(Some((512, 512))), a(512, 512));
    assert_eq!(alignments(Some((512, 4096))), a(512, 4096)); // 512e
    assert_eq!(alignments(Some((4096, 4096))), a(4096, 4096)); // 4Kn
    assert_eq!(alignments(Some((512, 65536))), a(512, 4096));
    assert_eq!(alignments(Some((4096, 65536))), a(4096, 4096));
    assert_eq!(alignments(Some((8192, 8192))), a(8192, 4096));
    // Physical smaller than logical, or nonsense: the logical size.
    assert_eq!(alignments(Some((4096, 512))), a(4096, 4096));
    assert_eq!(alignments(Some((512, 3000))), a(512, 512));
    // No answer (Windows 7, some filesystems) or nonsense logical size: 4096.
    assert_eq!(alignments(None), a(4096, 4096));
    assert_eq!(alignments(Some((0, 0))), a(4096, 4096));
    assert_eq!(alignments(Some((100, 4096))), a(4096, 4096));

    // What the engine sees: a 4096-aligned chunk into a 4096-aligned slot goes unbuffered on
    // a 64 KiB-physical volume (before, the one alignment was 65536 and it went buffered).
    let al = alignments(Some((512, 65536)));
    assert_eq!(al.max(), 4096);
    assert_eq!(
        plan(3 * 4096, 1 << 20, 7 * 4096, al.offset, al.memory),
        Plan::Direct
    );
    // A 512-aligned offset and length into a page-aligned buffer too (512e volume).
    let al = alignments(Some((512, 4096)));
    assert_eq!(
        plan(512, 4096 + 512, 8192, al.offset, al.memory),
        Plan::Direct
    );
    // But not into a buffer that is only 512-aligned.
    assert_eq!(
        plan(512, 4096 + 512, 8192 + 512, al.offset, al.memory),
        Plan::Buffered
    );
}

/// The handle reports both alignments, and `direct_alignment` is their maximum.
#[test]
fn handles_report_both_alignments() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.bin");
    pattern::write_full(&path, 1 << 16).unwrap();
    let al = DirectAlignment {
        offset: 512,
        memory: 4096,
    };
    let h = handle(&path, al, IO_TIMEOUT);
    assert_eq!(h.direct_alignments(), Some(al));
    assert_eq!(h.direct_alignment(), Some(4096));
    let (shared, _) = SharedFile::open(&path).unwrap();
    let h = shared.open_handle(&path, &OpenConfig::default()).unwrap();
    let al = h.direct_alignments().unwrap();
    assert_eq!(h.direct_alignment(), Some(al.max()));
    assert!(al.memory <= PAGE && al.offset.is_power_of_two(), "{al:?}");
}

/// Debug builds refuse to issue an unbuffered ReadFile that breaks the alignment the handle
/// believes in (Wine would run it; Windows would fail it). Reached here by calling the
/// unbuffered path directly with a misaligned buffer, which `plan` never does.
#[test]
#[cfg(debug_assertions)]
fn misaligned_unbuffered_reads_panic_in_debug_builds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.bin");
    pattern::write_full(&path, 1 << 16).unwrap();
    let al = DirectAlignment {
        offset: 512,
        memory: 512,
    };
    let mut buf = crate::AlignedBuf::new(8192, 4096).unwrap();
    for (off, range) in [(100u64, 0..4096), (0, 1..513), (0, 0..100)] {
        let mut h = handle(&path, al, IO_TIMEOUT);
        let h = &mut h;
        let b = &mut buf[range.clone()];
        // exact_loop hands a misaligned range back without calling ReadFile, so go one level
        // lower: the call wrapper the unbuffered path uses.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let handle = h.direct_handle().unwrap();
            let mut size = CallSize::new(al.offset);
            let mut retries = 0;
            size.read(b, off, &mut retries, |b, o| {
                debug_assert_aligned(b, o, al.offset, al.memory);
                overlapped::read_overlapped(handle, h.event.0, b, o, IO_TIMEOUT)
            })
        }));
        assert!(r.is_err(), "offset {off}, range {range:?}: no panic");
    }
}

/// The 64 MiB call limit on a real file: a 136 MiB aligned read takes 3 unbuffered calls
/// (64 + 64 + 8 MiB) and a 70 MiB buffered one 2.
#[test]
fn large_reads_are_split_into_64_mib_calls() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.bin");
    let len = 136u64 << 20;
    let p = pattern::write_full(&path, len).unwrap();
    let al = DirectAlignment {
        offset: 4096,
        memory: 4096,
    };
    let mut h = handle(&path, al, IO_TIMEOUT);
    let mut buf = crate::AlignedBuf::new(len as usize, 4096).unwrap();
    h.read_exact_at(&mut buf, 0).unwrap();
    p.verify(0, &buf).unwrap();
    let s = h.stats();
    assert_eq!(
        (s.counters.direct_calls, s.counters.direct_bytes),
        (3, len),
        "{s:?}"
    );
    h.read_buffered(&mut buf[1..1 + (70 << 20)], 5).unwrap();
    p.verify(5, &buf[1..1 + (70 << 20)]).unwrap();
    let s = h.stats();
    assert_eq!(s.counters.buffered_calls, 2, "{s:?}");
    assert_eq!(s.call_retries, 0, "{s:?}");
}

#[link(name = "kernel32")]
extern "system" {
    fn CreateNamedPipeW(
        name: PCWSTR,
        open_mode: u32,
        pipe_mode: u32,
        max_instances: u32,
        out_buffer_size: u32,
        in_buffer_size: u32,
        default_timeout: u32,
        security_attributes: *const std::ffi::c_void,
    ) -> HANDLE;
}

/// A read that never completes is cancelled after the timeout and returns `TimedOut`, and the
/// handle still works afterwards. The "file" is the server end of a named pipe whose client
/// writes nothing, so the overlapped ReadFile stays pending (a disk file cannot be made to
/// hang on demand).
#[test]
fn a_read_that_never_completes_times_out_and_is_cancelled() {
    const PIPE_ACCESS_INBOUND: u32 = 1;
    let name = HSTRING::from(format!(
        r"\\.\pipe\ds4-io-timeout-{}-{:?}",
        std::process::id(),
        std::time::SystemTime::now()
    ));
    // SAFETY: `name` is a NUL-terminated wide string alive for the call; no security
    // attributes. Byte-mode pipe, one instance, 4 KiB buffers.
    let server = unsafe {
        CreateNamedPipeW(
            PCWSTR(name.as_ptr()),
            PIPE_ACCESS_INBOUND | FILE_FLAG_OVERLAPPED.0,
            0,
            1,
            4096,
            4096,
            0,
            std::ptr::null(),
        )
    };
    assert!(!server.is_invalid(), "CreateNamedPipeW failed");
    let server = Owned(server);
    // SAFETY: as for SharedFile::open: a live NUL-terminated name, no template.
    let client = unsafe {
        CreateFileW(
            &name,
            FILE_GENERIC_WRITE.0,
            FILE_SHARE_MODE(0),
            None,
            OPEN_EXISTING,
            FILE_ATTRIBUTE_NORMAL,
            None,
        )
    }
    .unwrap();
    let client = Owned(client);
    let event = new_event().unwrap();
    let mut buf = vec![0u8; 4096];
    let t0 = std::time::Instant::now();
    let e = overlapped::read_overlapped(server.0, event.0, &mut buf, 0, Duration::from_millis(300))
        .unwrap_err();
    let waited = t0.elapsed();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
    assert!(e.to_string().contains("cancelled"), "{e}");
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(30),
        "{waited:?}"
    );
    // The cancelled read took nothing: bytes written now arrive at the next read.
    let mut wrote = 0u32;
    // SAFETY: a synchronous handle (no FILE_FLAG_OVERLAPPED), a live 5-byte buffer, a
    // writable count.
    unsafe { WriteFile(client.0, Some(&b"hello"[..]), Some(&mut wrote), None) }.unwrap();
    assert_eq!(wrote, 5);
    let n = overlapped::read_overlapped(server.0, event.0, &mut buf, 0, IO_TIMEOUT).unwrap();
    assert_eq!(&buf[..n], b"hello");
}

/// A file marked sparse leaves what was never written unallocated: 8 GiB of length with
/// 1 MiB written at the end takes about 1 MiB. On NTFS this holds only because of
/// FSCTL_SET_SPARSE (gen-model's flash files rely on it); under Wine the Linux filesystem
/// makes the holes anyway and the test shows only that the call does no harm.
#[test]
fn marked_sparse_files_leave_holes() {
    use std::io::{Seek, SeekFrom, Write};
    use std::os::windows::io::AsRawHandle;
    use windows::Win32::Storage::FileSystem::{
        FileStandardInfo, GetCompressedFileSizeW, FILE_STANDARD_INFO,
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sparse.bin");
    let mut f = std::fs::File::create(&path).unwrap();
    mark_sparse(&f);
    f.seek(SeekFrom::Start(8 << 30)).unwrap();
    f.write_all(&vec![1u8; 1 << 20]).unwrap();
    f.set_len((8 << 30) + (2 << 20)).unwrap();
    f.sync_all().unwrap();
    assert_eq!(f.metadata().unwrap().len(), (8 << 30) + (2 << 20));
    // Two measures of the allocated bytes: GetCompressedFileSizeW is the documented one for
    // sparse files on Windows (Wine answers the logical size there); FileStandardInfo's
    // AllocationSize is what Wine fills from the Linux block count. Neither is ever below
    // the real allocation, so the smaller one is an honest upper bound on both.
    let mut info = FILE_STANDARD_INFO::default();
    // SAFETY: `f` is open; `info` is a writable FILE_STANDARD_INFO of the size passed.
    unsafe {
        GetFileInformationByHandleEx(
            HANDLE(f.as_raw_handle()),
            FileStandardInfo,
            (&mut info as *mut FILE_STANDARD_INFO).cast(),
            std::mem::size_of::<FILE_STANDARD_INFO>() as u32,
        )
    }
    .unwrap();
    drop(f);
    let name = HSTRING::from(path.as_path());
    let mut high = 0u32;
    // SAFETY: `name` is a NUL-terminated wide string and `high` a writable u32, both alive
    // for the call.
    let low = unsafe { GetCompressedFileSizeW(&name, Some(&mut high)) };
    let compressed = (u64::from(high) << 32) | u64::from(low);
    let allocated = compressed.min(u64::try_from(info.AllocationSize).unwrap_or(u64::MAX));
    assert!(
        allocated < 64 << 20,
        "1 MiB written, {compressed} B compressed size, {} B allocation size: not sparse",
        info.AllocationSize
    );
}
