//! Platform implementations of per-worker handles; one file per OS.
//!
//! PLACEHOLDER (skeleton): a portable std-based implementation (`FileExt::read_at` /
//! `seek_read`) so the engine can be built and tested; the IO-engine issue replaces it with
//! `unix.rs` (own fd, O_DIRECT when aligned) and `windows.rs` (ReOpenFile + OVERLAPPED).

use crate::file::{OpenConfig, ReadAt};
use std::fs::File;
use std::io;
use std::path::Path;

pub(crate) struct SharedFile;

impl SharedFile {
    pub(crate) fn open(path: &Path) -> io::Result<(Self, u64)> {
        let f = File::open(path)?;
        let len = f.metadata()?.len();
        Ok((SharedFile, len))
    }

    pub(crate) fn open_handle(
        &self,
        path: &Path,
        _cfg: &OpenConfig,
    ) -> io::Result<Box<dyn ReadAt>> {
        Ok(Box::new(StdHandle {
            file: File::open(path)?,
        }))
    }
}

struct StdHandle {
    file: File,
}

impl ReadAt for StdHandle {
    fn read_exact_at(&mut self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            #[cfg(unix)]
            let r = std::os::unix::fs::FileExt::read_at(&self.file, buf, offset);
            #[cfg(windows)]
            let r = std::os::windows::fs::FileExt::seek_read(&self.file, buf, offset);
            match r {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
