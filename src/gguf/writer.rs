//! A streaming GGUF v3 writer: the header (metadata of every value type + tensor infos with
//! aligned relative offsets) is planned up front from `(name, type, dims)` alone, then tensor
//! data is written tensor by tensor (or range by range) through a fill callback in bounded
//! chunks. Anything never written is a hole: the writer seeks past it and the final `set_len`
//! extends the file, so on a filesystem with sparse files an 81 GiB layout costs no disk.
//!
//! Why it exists: `ds4 gen-model` must produce files far larger than memory (the full Flash
//! shape) with exactly the layout gguf-py and llama.cpp produce: each tensor starts at a
//! multiple of `general.alignment` relative to the data section, the data section starts at an
//! aligned absolute offset, and every tensor (the last one included) is zero-padded to the
//! alignment.
//!
//! Limits: holes read back as zeros (a zero block is a valid block of every ggml type we
//! generate, since the scale `d` is 0); the header is built in memory (it is small: the Flash
//! tokenizer list is a few MiB). All size arithmetic is checked.

use super::{GgmlType, GgufFile, TensorInfo, Value};
use std::io::{self, Seek, SeekFrom, Write};

/// The GGUF magic, "GGUF" in file order.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// The version this writer produces.
pub const VERSION: u32 = 3;
/// Alignment used when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Most dimensions a tensor may have (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;
/// Largest alignment accepted (1 MiB): beyond that padding is waste, not a layout.
pub const MAX_ALIGNMENT: u64 = 1 << 20;
/// Default size of one data chunk handed to a fill callback.
pub const DEFAULT_CHUNK: usize = 1 << 20;

/// Error type a fill callback may return.
pub type FillError = Box<dyn std::error::Error + Send + Sync>;

/// A fill callback: `fill(offset_in_tensor, chunk)` writes the tensor's bytes at that offset
/// into `chunk`.
pub type Fill<'a> = dyn FnMut(u64, &mut [u8]) -> Result<(), FillError> + 'a;

/// What can go wrong while planning or writing a GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("I/O error writing {what} at byte {offset} (length {len})")]
    Io {
        what: String,
        offset: u64,
        len: u64,
        #[source]
        source: io::Error,
    },
    #[error("size overflow computing {what}")]
    Overflow { what: String },
    #[error("duplicate tensor name {name:?}")]
    DuplicateTensor { name: String },
    #[error("duplicate metadata key {key:?}")]
    DuplicateKey { key: String },
    #[error("general.alignment must be a u32 power of two in 1..={MAX_ALIGNMENT}, got {value:?}")]
    BadAlignment { value: Value },
    #[error("tensor {name:?}: {why}")]
    BadTensor { name: String, why: String },
    #[error("metadata key {key:?}: array element {index} is {found}, the array holds {expected}")]
    MixedArray {
        key: String,
        index: usize,
        expected: &'static str,
        found: &'static str,
    },
    #[error("tensor index {index} out of range ({count} tensors)")]
    NoSuchTensor { index: usize, count: usize },
    #[error("range {start}+{len} outside tensor {tensor:?} of {nbytes} bytes")]
    Range {
        tensor: String,
        start: u64,
        len: u64,
        nbytes: u64,
    },
    #[error("filling tensor {tensor:?} at byte {offset} of the tensor")]
    Fill {
        tensor: String,
        offset: u64,
        #[source]
        source: FillError,
    },
}

/// A tensor to be written: what the header says about it.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    pub ggml_type: GgmlType,
    /// GGUF order, dim0 innermost.
    pub dims: Vec<u64>,
}

impl TensorSpec {
    pub fn new(name: impl Into<String>, ggml_type: GgmlType, dims: &[u64]) -> Self {
        Self {
            name: name.into(),
            ggml_type,
            dims: dims.to_vec(),
        }
    }

    /// Bytes of this tensor's data, checked: dims 1..=4, none 0, dim0 a multiple of the block
    /// size.
    pub fn nbytes(&self) -> Result<u64, WriteError> {
        let bad = |why: String| WriteError::BadTensor {
            name: self.name.clone(),
            why,
        };
        if self.dims.is_empty() || self.dims.len() > MAX_DIMS {
            return Err(bad(format!(
                "{} dims (1..={MAX_DIMS} allowed)",
                self.dims.len()
            )));
        }
        if let Some(i) = self.dims.iter().position(|&d| d == 0) {
            // The parser rejects empty tensors as hostile: never write one.
            return Err(bad(format!("dim {i} is 0")));
        }
        let be = self.ggml_type.block_elems();
        if self.dims[0] % be != 0 {
            return Err(bad(format!(
                "dim0 {} is not a multiple of the {} block size {be}",
                self.dims[0], self.ggml_type
            )));
        }
        let elems = self
            .dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| bad(format!("element count of {:?} overflows u64", self.dims)))?;
        self.ggml_type
            .bytes_for(elems)
            .ok_or_else(|| bad(format!("byte size of {:?} overflows u64", self.dims)))
    }
}

/// One tensor's place in the planned file.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedTensor {
    pub name: String,
    pub ggml_type: GgmlType,
    pub dims: Vec<u64>,
    /// Offset relative to the data section (what the tensor info stores).
    pub rel_offset: u64,
    /// Absolute file offset.
    pub offset: u64,
    pub nbytes: u64,
}

/// The complete layout of a file: header bytes, every tensor's offset, the final length.
#[derive(Clone, Debug)]
pub struct Layout {
    header: Vec<u8>,
    metadata: Vec<(String, Value)>,
    pub alignment: u64,
    /// Absolute offset of the data section (header length rounded up to the alignment).
    pub data_offset: u64,
    pub tensors: Vec<PlannedTensor>,
    /// Final file length (every tensor padded to the alignment).
    pub total_len: u64,
}

fn align_up(x: u64, a: u64, what: &str) -> Result<u64, WriteError> {
    let r = x % a;
    if r == 0 {
        return Ok(x);
    }
    x.checked_add(a - r).ok_or_else(|| WriteError::Overflow {
        what: what.to_string(),
    })
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Encodes a value's payload (without its type id).
fn put_value(out: &mut Vec<u8>, key: &str, v: &Value) -> Result<(), WriteError> {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => put_str(out, s),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Array(items) => {
            // An empty array has no element to take a type from; u8 is what we declare.
            let elem = items.first().map_or(0, Value::gguf_type);
            for (index, it) in items.iter().enumerate() {
                if it.gguf_type() != elem {
                    return Err(WriteError::MixedArray {
                        key: key.to_string(),
                        index,
                        expected: items[0].type_name(),
                        found: it.type_name(),
                    });
                }
            }
            out.extend_from_slice(&elem.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            // A nested array's payload is its own element type + count + items, which is
            // exactly what `put_value` writes for an `Array`.
            for it in items {
                put_value(out, key, it)?;
            }
        }
    }
    Ok(())
}

/// Plans a file: validates tensors and metadata, computes every offset and the header bytes.
/// `general.alignment` (u32, power of two) in `metadata` sets the alignment; default 32.
pub fn plan(metadata: &[(String, Value)], tensors: &[TensorSpec]) -> Result<Layout, WriteError> {
    let mut alignment = DEFAULT_ALIGNMENT;
    let mut seen_keys = std::collections::HashSet::new();
    for (k, v) in metadata {
        if !seen_keys.insert(k.as_str()) {
            return Err(WriteError::DuplicateKey { key: k.clone() });
        }
        if k == "general.alignment" {
            match v {
                Value::U32(a) if a.is_power_of_two() && u64::from(*a) <= MAX_ALIGNMENT => {
                    alignment = u64::from(*a)
                }
                _ => return Err(WriteError::BadAlignment { value: v.clone() }),
            }
        }
    }

    let mut header = Vec::new();
    header.extend_from_slice(&MAGIC);
    header.extend_from_slice(&VERSION.to_le_bytes());
    header.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    header.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (k, v) in metadata {
        put_str(&mut header, k);
        header.extend_from_slice(&v.gguf_type().to_le_bytes());
        put_value(&mut header, k, v)?;
    }

    let mut seen = std::collections::HashSet::new();
    let mut planned = Vec::with_capacity(tensors.len());
    let mut rel = 0u64;
    for t in tensors {
        if !seen.insert(t.name.as_str()) {
            return Err(WriteError::DuplicateTensor {
                name: t.name.clone(),
            });
        }
        let nbytes = t.nbytes()?;
        put_str(&mut header, &t.name);
        header.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            header.extend_from_slice(&d.to_le_bytes());
        }
        header.extend_from_slice(&t.ggml_type.id().to_le_bytes());
        header.extend_from_slice(&rel.to_le_bytes());
        planned.push(PlannedTensor {
            name: t.name.clone(),
            ggml_type: t.ggml_type,
            dims: t.dims.clone(),
            rel_offset: rel,
            offset: 0,
            nbytes,
        });
        let end = rel
            .checked_add(nbytes)
            .ok_or_else(|| WriteError::Overflow {
                what: format!("data section end after tensor {:?}", t.name),
            })?;
        rel = align_up(end, alignment, "data section length")?;
    }
    let data_offset = align_up(header.len() as u64, alignment, "data section offset")?;
    for p in &mut planned {
        p.offset = data_offset
            .checked_add(p.rel_offset)
            .ok_or_else(|| WriteError::Overflow {
                what: format!("absolute offset of tensor {:?}", p.name),
            })?;
    }
    let total_len = data_offset
        .checked_add(rel)
        .ok_or_else(|| WriteError::Overflow {
            what: "file length".to_string(),
        })?;
    Ok(Layout {
        header,
        metadata: metadata.to_vec(),
        alignment,
        data_offset,
        tensors: planned,
        total_len,
    })
}

impl Layout {
    /// The header bytes (magic through the last tensor info, before padding).
    pub fn header_bytes(&self) -> &[u8] {
        &self.header
    }

    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// Index of the tensor called `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.tensors.iter().position(|t| t.name == name)
    }

    /// Total bytes of tensor data (without padding).
    pub fn tensor_bytes(&self) -> u64 {
        // Cannot overflow: each end was checked during planning and padding only adds.
        self.tensors.iter().map(|t| t.nbytes).sum()
    }

    /// What a correct reader must parse from the file this layout describes.
    pub fn expected_file(&self) -> GgufFile {
        GgufFile {
            version: VERSION,
            alignment: self.alignment,
            metadata: self.metadata.clone(),
            tensors: self
                .tensors
                .iter()
                .map(|t| TensorInfo {
                    name: t.name.clone(),
                    ggml_type: t.ggml_type,
                    dims: t.dims.clone(),
                    offset: t.offset,
                    nbytes: t.nbytes,
                })
                .collect(),
            data_offset: self.data_offset,
            file_size: self.total_len,
        }
    }
}

/// An output the writer can seek in and truncate/extend (for trailing holes).
pub trait Sink: Write + Seek {
    fn set_len(&mut self, len: u64) -> io::Result<()>;
}

impl Sink for std::fs::File {
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        std::fs::File::set_len(self, len)
    }
}

impl Sink for io::Cursor<Vec<u8>> {
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        let len = usize::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::OutOfMemory, "length exceeds memory"))?;
        self.get_mut().resize(len, 0);
        Ok(())
    }
}

impl<S: Sink> Sink for io::BufWriter<S> {
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.flush()?;
        self.get_mut().set_len(len)
    }
}

/// Writes a planned file: header on creation, tensor data on request, holes elsewhere.
pub struct GgufWriter<W: Sink> {
    out: W,
    layout: Layout,
    /// Where the sink's cursor is (avoids seeks, which flush a `BufWriter`).
    pos: u64,
    buf: Vec<u8>,
}

impl<W: Sink> GgufWriter<W> {
    /// Writes the header at offset 0. `chunk` is the size of the buffer fill callbacks get.
    pub fn new(mut out: W, layout: Layout, chunk: usize) -> Result<Self, WriteError> {
        let hlen = layout.header.len() as u64;
        let io_err = |source| WriteError::Io {
            what: "header".to_string(),
            offset: 0,
            len: hlen,
            source,
        };
        out.seek(SeekFrom::Start(0)).map_err(io_err)?;
        out.write_all(&layout.header).map_err(io_err)?;
        Ok(Self {
            out,
            layout,
            pos: hlen,
            buf: vec![0u8; chunk.max(1)],
        })
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Writes all of tensor `index`; `fill(offset_in_tensor, buf)` supplies each chunk.
    pub fn write_tensor(&mut self, index: usize, fill: &mut Fill<'_>) -> Result<(), WriteError> {
        let nbytes = self.tensor(index)?.nbytes;
        self.write_tensor_range(index, 0, nbytes, fill)
    }

    /// Writes bytes `[start, start+len)` of tensor `index`; the rest stays a hole unless
    /// written by another call.
    pub fn write_tensor_range(
        &mut self,
        index: usize,
        start: u64,
        len: u64,
        fill: &mut Fill<'_>,
    ) -> Result<(), WriteError> {
        let t = self.tensor(index)?;
        let (name, base, nbytes) = (t.name.clone(), t.offset, t.nbytes);
        let range_end = start.checked_add(len).filter(|&e| e <= nbytes);
        if range_end.is_none() {
            return Err(WriteError::Range {
                tensor: name,
                start,
                len,
                nbytes,
            });
        }
        // Cannot overflow: base + nbytes <= total_len was checked by `plan`.
        let abs = base + start;
        if self.pos != abs {
            self.out
                .seek(SeekFrom::Start(abs))
                .map_err(|source| WriteError::Io {
                    what: format!("tensor {name:?} (seek)"),
                    offset: abs,
                    len,
                    source,
                })?;
            self.pos = abs;
        }
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(self.buf.len() as u64) as usize;
            let chunk = &mut self.buf[..n];
            fill(start + done, chunk).map_err(|source| WriteError::Fill {
                tensor: name.clone(),
                offset: start + done,
                source,
            })?;
            self.out.write_all(chunk).map_err(|source| WriteError::Io {
                what: format!("tensor {name:?}"),
                offset: self.pos,
                len: n as u64,
                source,
            })?;
            done += n as u64;
            self.pos += n as u64;
        }
        Ok(())
    }

    /// Flushes and sets the final length (padding and trailing holes read as zeros).
    pub fn finish(mut self) -> Result<W, WriteError> {
        let total = self.layout.total_len;
        let io_err = |source| WriteError::Io {
            what: "file end".to_string(),
            offset: total,
            len: 0,
            source,
        };
        self.out.flush().map_err(io_err)?;
        self.out.set_len(total).map_err(io_err)?;
        Ok(self.out)
    }

    fn tensor(&self, index: usize) -> Result<&PlannedTensor, WriteError> {
        self.layout
            .tensors
            .get(index)
            .ok_or(WriteError::NoSuchTensor {
                index,
                count: self.layout.tensors.len(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, t: GgmlType, dims: &[u64]) -> TensorSpec {
        TensorSpec::new(name, t, dims)
    }

    #[test]
    fn offsets_are_aligned_and_padded() {
        let md = vec![("general.alignment".to_string(), Value::U32(64))];
        let ts = vec![
            spec("a", GgmlType::F32, &[3]),
            spec("b", GgmlType::Q8_0, &[64, 2]),
            spec("c", GgmlType::F16, &[5]),
        ];
        let l = plan(&md, &ts).unwrap();
        assert_eq!(l.alignment, 64);
        assert_eq!(l.data_offset % 64, 0);
        assert!(l.data_offset >= l.header_bytes().len() as u64);
        let rel: Vec<u64> = l.tensors.iter().map(|t| t.rel_offset).collect();
        assert_eq!(rel, vec![0, 64, 256]); // 12 -> 64; 64 + 136 -> 256
        assert_eq!(l.tensors[1].nbytes, 136);
        assert_eq!(l.total_len, l.data_offset + 320); // 10 bytes padded to 64
    }

    #[test]
    fn writes_data_and_holes() {
        let ts = vec![
            spec("a", GgmlType::F32, &[4]),
            spec("b", GgmlType::I8, &[40]),
        ];
        let l = plan(&[], &ts).unwrap();
        let (oa, ob) = (l.tensors[0].offset as usize, l.tensors[1].offset as usize);
        let total = l.total_len as usize;
        let mut w = GgufWriter::new(io::Cursor::new(Vec::new()), l, 7).unwrap();
        w.write_tensor_range(1, 10, 20, &mut |off, buf| {
            for (i, b) in buf.iter_mut().enumerate() {
                *b = (off as usize + i) as u8 + 1;
            }
            Ok(())
        })
        .unwrap();
        let v = w.finish().unwrap().into_inner();
        assert_eq!(v.len(), total);
        assert_eq!(&v[..4], b"GGUF");
        assert!(v[oa..oa + 16].iter().all(|&b| b == 0));
        assert!(v[ob..ob + 10].iter().all(|&b| b == 0));
        let want: Vec<u8> = (10..30).map(|i| i as u8 + 1).collect();
        assert_eq!(&v[ob + 10..ob + 30], &want[..]);
        assert!(v[ob + 30..].iter().all(|&b| b == 0));
    }

    #[test]
    fn rejects_bad_input() {
        let e = plan(&[], &[spec("q", GgmlType::Q8_0, &[33])]).unwrap_err();
        assert!(matches!(e, WriteError::BadTensor { .. }), "{e}");
        let e = plan(&[], &[spec("q", GgmlType::F32, &[1, 1, 1, 1, 1])]).unwrap_err();
        assert!(e.to_string().contains("5 dims"), "{e}");
        let e = plan(&[], &[spec("q", GgmlType::F32, &[u64::MAX, 2])]).unwrap_err();
        assert!(e.to_string().contains("overflows"), "{e}");
        let e = plan(
            &[],
            &[
                spec("x", GgmlType::F32, &[1]),
                spec("x", GgmlType::F32, &[1]),
            ],
        )
        .unwrap_err();
        assert!(matches!(e, WriteError::DuplicateTensor { .. }));
        let md = vec![("general.alignment".to_string(), Value::U32(24))];
        assert!(matches!(
            plan(&md, &[]).unwrap_err(),
            WriteError::BadAlignment { .. }
        ));
        let md = vec![(
            "k".to_string(),
            Value::Array(vec![Value::U8(1), Value::I8(1)]),
        )];
        assert!(matches!(
            plan(&md, &[]).unwrap_err(),
            WriteError::MixedArray { index: 1, .. }
        ));
        let l = plan(&[], &[spec("a", GgmlType::F32, &[4])]).unwrap();
        let mut w = GgufWriter::new(io::Cursor::new(Vec::new()), l, 8).unwrap();
        let e = w
            .write_tensor_range(0, 8, 9, &mut |_, _| Ok(()))
            .unwrap_err();
        assert!(matches!(e, WriteError::Range { .. }), "{e}");
        assert!(matches!(
            w.write_tensor(1, &mut |_, _| Ok(())).unwrap_err(),
            WriteError::NoSuchTensor { .. }
        ));
    }

    #[test]
    fn encodes_every_value_type() {
        let md = vec![
            ("u8".to_string(), Value::U8(1)),
            (
                "nested".to_string(),
                Value::Array(vec![Value::Array(vec![Value::I16(-2)])]),
            ),
        ];
        let l = plan(&md, &[]).unwrap();
        let h = l.header_bytes();
        // magic, version, 0 tensors, 2 kv
        assert_eq!(&h[4..8], &3u32.to_le_bytes());
        assert_eq!(&h[16..24], &2u64.to_le_bytes());
        // "u8" key: len 2, bytes, type 0, value 1
        assert_eq!(&h[24..32], &2u64.to_le_bytes());
        assert_eq!(&h[32..34], b"u8");
        assert_eq!(&h[34..38], &0u32.to_le_bytes());
        assert_eq!(h[38], 1);
        // nested: type 9, elem type 9, count 1, then inner: elem type 3, count 1, -2i16
        let rest = &h[39 + 8 + 6..];
        assert_eq!(&rest[..4], &9u32.to_le_bytes());
        assert_eq!(&rest[4..8], &9u32.to_le_bytes());
        assert_eq!(&rest[8..16], &1u64.to_le_bytes());
        assert_eq!(&rest[16..20], &3u32.to_le_bytes());
        assert_eq!(&rest[20..28], &1u64.to_le_bytes());
        assert_eq!(&rest[28..30], &(-2i16).to_le_bytes());
        assert_eq!(rest.len(), 30);
    }
}
