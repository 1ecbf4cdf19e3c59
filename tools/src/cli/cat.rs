//! `ds4 cat FILE TENSOR [--expert E] [--range START:LEN]`: writes a tensor's bytes (or one
//! expert's slice, or a range of either) to stdout.
//!
//! The bytes come through the streaming engine, a window of [`CHUNK`]-byte requests in flight
//! while earlier ones are written out in order (the library's [`range_copy`]: host backend,
//! readers and window following the bytes' page-cache residency; bounded memory whatever the
//! tensor size). A closed stdout (`ds4 cat … | head -c 10`) is success.
//! A terminal as stdout is refused (exit 2) unless `--force`: tensor bytes are binary, and
//! megabytes of them would garble the terminal.

use super::{is_broken_pipe, CliError, CliResult};
use ds4_stream::device::BackendKind;
use ds4_stream::engine::range_copy::{self, copy_range, open_engine, CopyError, CopyShape, CHUNK};
use ds4_stream::engine::{Engine, EngineConfig, EngineError};
use ds4_stream::gguf::{GgufFile, TensorInfo};
use ds4_stream::model::Ds4Model;
use std::collections::VecDeque;
use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;

/// Requests in flight through a GPU (`--backend cuda|hip`; memory bound: WINDOW x CHUNK of
/// device memory).
pub const WINDOW: usize = 12;
/// Reader workers through a GPU.
pub const CAT_WORKERS: usize = 8;

/// [`range_copy::shape_of`] the bytes `[offset, offset + len)` of `path` (how [`range_copy::shape_for`]
/// judges them on this machine).
///
/// `DS4_CAT_SHAPE=WORKERS,WINDOW,CHUNK_KIB[,tune]` overrides it (for benchmarks of other
/// shapes: docs/bench/cat-bench.sh; `tune`: measure how many readers (up to WORKERS, with
/// requests up to WINDOW) the disk wants, as cold copies do);
/// a value that does not parse is an error naming the variable, so a
/// sweep never measures the default shape by mistake.
pub fn shape_of(path: &std::path::Path, offset: u64, len: u64) -> Result<CopyShape, String> {
    if let Some(v) = std::env::var_os("DS4_CAT_SHAPE") {
        let v = v.to_string_lossy();
        return parse_shape(&v).ok_or_else(|| {
            format!(
                "DS4_CAT_SHAPE={v:?}: expected WORKERS,WINDOW,CHUNK_KIB[,tune] (workers \
                 1..=1024, window 1..=4096, chunk a multiple of 4 KiB up to 65536 KiB)"
            )
        });
    }
    Ok(range_copy::shape_of(path, offset, len))
}

/// `WORKERS,WINDOW,CHUNK_KIB[,tune]`: workers 1..=1024, window 1..=4096, the chunk a multiple
/// of 4 KiB up to 64 MiB.
fn parse_shape(v: &str) -> Option<CopyShape> {
    let (v, tune) = match v.trim_end().strip_suffix(",tune") {
        Some(head) => (head, true),
        None => (v, false),
    };
    let n: Vec<usize> = v
        .split(',')
        .map(|x| x.trim().parse().ok())
        .collect::<Option<_>>()?;
    match n[..] {
        [workers, window, kib]
            if (1..=1024).contains(&workers)
                && (1..=4096).contains(&window)
                && kib >= 4
                && kib % 4 == 0
                && kib <= 64 << 10 =>
        {
            Some(CopyShape {
                workers,
                window,
                chunk: kib << 10,
                tune,
            })
        }
        _ => None,
    }
}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// GGUF file.
    pub file: PathBuf,
    /// Tensor name, as `ds4 inspect` lists it (e.g. blk.42.ffn_down_exps.weight).
    pub tensor: String,
    /// Only this expert's slice of a routed tensor (blk.N.ffn_{gate,up,down}_exps.weight).
    #[arg(long, value_name = "E")]
    pub expert: Option<u64>,
    /// Only bytes START..START+LEN of the tensor (or of the expert slice); `START:` means to
    /// the end. Decimal or 0x-hex.
    #[arg(long, value_name = "START:LEN")]
    pub range: Option<String>,
    /// Read through this device: host (default: straight into host memory), or cuda / hip /
    /// auto, where every chunk goes file → pinned staging → device memory and is read back
    /// before it is written (checks the GPU path byte for byte; slower than host). Unlike the
    /// other commands' `auto` default: the bytes end in host memory, so a GPU only adds a trip.
    #[arg(long, default_value = "host")]
    pub backend: ds4_stream::device::BackendArg,
    /// Write the bytes even when stdout is a terminal (refused otherwise: they are binary).
    #[arg(long)]
    pub force: bool,
}

/// The refusal of binary output to a terminal, with how to opt in.
fn terminal_refusal(what: &str, len: u64) -> CliError {
    CliError::bad_input(format!(
        "refusing to write {len} bytes of {what} (binary) to a terminal: redirect stdout \
         (`> FILE`, `| xxd | head`) or pass --force"
    ))
}

fn cat_engine(a: &Args, shape: CopyShape) -> Result<Engine, CliError> {
    // The header was just read from this path, so a failing open here is a runtime condition
    // (too many open files, the file replaced meanwhile), not bad input.
    open_engine(&a.file, shape).map_err(|e| CliError::runtime(ds4_stream::errors::chain(&e)))
}

/// `cat` through a GPU: [`WINDOW`] device buffers of [`CHUNK`] bytes in a ring, each chunk
/// read into one by the engine (staged), then read back and written, in order.
fn copy_via_device(
    a: &Args,
    offset: u64,
    len: u64,
    out: &mut dyn Write,
) -> Result<Result<(), CopyError>, CliError> {
    let device = a
        .backend
        .open(ds4_stream::device::OpenOptions {
            ordinal: 0,
            unified: Some(false),
            host_unified: None,
        })
        .map_err(|e| CliError::runtime(ds4_stream::errors::chain(&e)))?;
    let cfg = EngineConfig {
        workers: CAT_WORKERS,
        ..EngineConfig::default()
    };
    let engine = Engine::open(&a.file, device.clone(), cfg)
        .map_err(|e| CliError::runtime(ds4_stream::errors::chain(&e)))?;
    let ring: Vec<std::sync::Arc<ds4_stream::device::DeviceBuffer>> = (0..WINDOW)
        .map(|_| device.alloc(CHUNK).map(std::sync::Arc::new))
        .collect::<Result<_, _>>()
        .map_err(|e| CliError::runtime(ds4_stream::errors::chain(&e)))?;
    let dev_err = |e: ds4_stream::device::DeviceError| {
        CopyError::Read(EngineError::Device {
            offset: 0,
            len: 0,
            label: None,
            source: e,
        })
    };
    let mut host = vec![0u8; CHUNK];
    let mut queued = VecDeque::new();
    let (mut next, mut i) = (0u64, 0usize);
    let c = CHUNK as u64;
    Ok((|| {
        loop {
            while next < len && queued.len() < WINDOW {
                let at = offset + next;
                let n = (len - next).min(c - at % c) as usize;
                let buf = ring[i % WINDOW].clone();
                let t = engine
                    .submit(vec![ds4_stream::engine::ReadRequest::new(
                        at,
                        n,
                        buf.clone(),
                        0,
                    )])
                    .map_err(CopyError::Read)?;
                queued.push_back((t, buf, n));
                next += n as u64;
                i += 1;
            }
            let Some((t, buf, n)) = queued.pop_front() else {
                break;
            };
            t.wait().map_err(CopyError::Read)?;
            device.read_d2h(&buf, 0, &mut host[..n]).map_err(dev_err)?;
            out.write_all(&host[..n]).map_err(CopyError::Write)?;
        }
        out.flush().map_err(CopyError::Write)
    })())
}

fn parse_num(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Parses `START:LEN` / `START:` against a region of `size` bytes; returns (start, len).
fn parse_range(spec: &str, size: u64) -> Result<(u64, u64), String> {
    let (a, b) = spec
        .split_once(':')
        .ok_or_else(|| format!("--range {spec:?}: expected START:LEN"))?;
    let start = parse_num(a).ok_or_else(|| format!("--range {spec:?}: bad START {a:?}"))?;
    if start > size {
        return Err(format!(
            "--range {spec:?}: START {start} is past the end ({size} bytes)"
        ));
    }
    let len = if b.trim().is_empty() {
        size - start
    } else {
        parse_num(b).ok_or_else(|| format!("--range {spec:?}: bad LEN {b:?}"))?
    };
    if start.checked_add(len).is_none_or(|end| end > size) {
        return Err(format!(
            "--range {spec:?}: {start}+{len} exceeds the {size} bytes available"
        ));
    }
    Ok((start, len))
}

/// Names are compared on their first this many bytes (DS4 names are under 40): with at most
/// `Caps::max_tensors` names, the search stays well under a second.
const DISTANCE_PREFIX: usize = 64;

/// Edit distance of the first [`DISTANCE_PREFIX`] bytes.
fn distance(a: &str, b: &str) -> usize {
    let a = &a.as_bytes()[..a.len().min(DISTANCE_PREFIX)];
    let b = &b.as_bytes()[..b.len().min(DISTANCE_PREFIX)];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, &ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The tensor name closest to `name`.
fn closest<'a>(f: &'a GgufFile, name: &str) -> Option<&'a str> {
    f.tensors
        .iter()
        .map(|t| (distance(&t.name, name), t.name.as_str()))
        .min()
        .map(|(_, n)| n)
}

fn find_tensor<'a>(f: &'a GgufFile, a: &Args) -> Result<&'a TensorInfo, CliError> {
    f.tensor(&a.tensor).ok_or_else(|| {
        let hint = closest(f, &a.tensor)
            .map(|n| format!(" (closest: {n})"))
            .unwrap_or_default();
        CliError::bad_input(format!(
            "no tensor {:?} in {}{hint}",
            a.tensor,
            a.file.display()
        ))
    })
}

pub fn run(a: Args) -> CliResult {
    // Same exit-code policy as `ds4 inspect`: malformed or unopenable file 2, failed read 1.
    let f = super::inspect::load(&a.file)?;
    let t = find_tensor(&f, &a)?;
    let (base, size, what) = match a.expert {
        None => (t.offset, t.nbytes, format!("tensor {}", t.name)),
        Some(e) => {
            let m = Ds4Model::from_gguf(&f).map_err(|err| {
                CliError::bad_input(format!(
                    "--expert needs a DS4 layout, but {}: {err}",
                    a.file.display()
                ))
            })?;
            let r = m.routed_tensor(&t.name).ok_or_else(|| {
                CliError::bad_input(format!(
                    "--expert: {} is not a routed expert tensor \
                     (blk.N.ffn_gate_exps / ffn_up_exps / ffn_down_exps.weight)",
                    t.name
                ))
            })?;
            let s = r.slice(e).map_err(CliError::bad_input)?;
            (s.offset, s.len, format!("tensor {} expert {e}", t.name))
        }
    };
    let (start, len) = match &a.range {
        None => (0, size),
        Some(spec) => parse_range(spec, size).map_err(CliError::bad_input)?,
    };
    // Cannot overflow: base + size is inside a parsed tensor and start + len <= size.
    let offset = base + start;

    let stdout = io::stdout();
    if !a.force && stdout.is_terminal() {
        return Err(terminal_refusal(&what, len));
    }
    let mut out = stdout.lock();
    let r = if a.backend == ds4_stream::device::BackendArg::Kind(BackendKind::Host) {
        let shape = shape_of(&a.file, offset, len).map_err(CliError::bad_input)?;
        let engine = cat_engine(&a, shape)?;
        copy_range(&engine, shape, offset, len, &mut out).map(|_| ())
    } else {
        copy_via_device(&a, offset, len, &mut out)?
    };
    match r {
        Ok(()) => Ok(()),
        Err(CopyError::Write(e)) if is_broken_pipe(&e) => Ok(()),
        Err(CopyError::Write(e)) => Err(CliError::runtime(format!("writing stdout: {e}"))),
        Err(CopyError::Read(e)) => Err(CliError::runtime(format!(
            "{what}: {}",
            ds4_stream::errors::chain(&e)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_override_parses_or_is_ignored() {
        assert_eq!(
            parse_shape("4, 6,8192"),
            Some(CopyShape {
                workers: 4,
                window: 6,
                chunk: 8 << 20,
                tune: false
            })
        );
        assert_eq!(
            parse_shape("16,24,4096,tune"),
            Some(CopyShape {
                workers: 16,
                window: 24,
                chunk: 4 << 20,
                tune: true
            })
        );
        for bad in [
            "",
            "4,6",
            "4,6,8192,1",
            "4,6,8192,tun",
            "tune",
            "0,6,4096",
            "4,0,4096",
            "4,6,6",
            "4,6,0",
            "a,b,c",
            "1025,1,4",
            "1,4097,4",
        ] {
            assert_eq!(parse_shape(bad), None, "{bad:?}");
        }
        assert_eq!(parse_shape(&format!("1,1,{}", (64 << 10) + 4)), None);
    }

    #[test]
    fn ranges() {
        assert_eq!(parse_range("0:10", 10), Ok((0, 10)));
        assert_eq!(parse_range("4:", 10), Ok((4, 6)));
        assert_eq!(parse_range("10:", 10), Ok((10, 0)));
        assert_eq!(parse_range("0x2:0x3", 10), Ok((2, 3)));
        assert!(parse_range("11:", 10).unwrap_err().contains("past the end"));
        assert!(parse_range("5:6", 10).unwrap_err().contains("exceeds"));
        assert!(parse_range("1:18446744073709551615", 10).is_err());
        assert!(parse_range("5", 10).is_err());
        assert!(parse_range("a:1", 10).is_err());
        assert!(parse_range("1:-1", 10).is_err());
    }

    #[test]
    fn edit_distance() {
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("same", "same"), 0);
    }
}
