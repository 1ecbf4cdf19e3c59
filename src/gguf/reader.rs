//! The GGUF header parser: magic, version, counts, metadata, tensor infos, data offset.
//!
//! One parser runs over one cursor ([`HeaderSource`]): a byte slice ([`parse_bytes`]) or a file
//! read sequentially through a bounded buffer ([`parse_file`]); the data section is never read or
//! mapped. Every number from the file is checked before it is used, in this order: against the
//! named cap in [`Caps`], then against what the remaining bytes can hold, then for arithmetic
//! overflow (all sizes are u64, all arithmetic checked). Reservations never trust a count beyond
//! a small prefix, so memory stays proportional to the bytes actually read.
//!
//! Accepted: GGUF v3 and v2 (same layout), little-endian. Rejected with a typed error: v1
//! (32-bit counts), big-endian files, anything [`GgufError`] lists.

use super::error::GgufError;
use super::header_source::{FileHeaderSource, HeaderSource, SliceHeaderSource};
use super::value::{read_string_bytes, read_u32, read_u64, read_value, value_type_name, Budget};
use super::{Caps, GgmlType, GgufFile, TensorInfo, Value};
use std::collections::HashMap;
use std::path::Path;

/// `general.alignment` when the key is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// Smallest encoded tensor info: name length (8, empty name), n_dims (4), one dim (8), type (4),
/// offset (8).
const MIN_TENSOR_INFO: u64 = 32;
/// Smallest encoded metadata pair: key length (8, empty key), value type (4), a 1-byte value.
const MIN_KV: u64 = 13;

/// Parses the header of the GGUF file at `path` with bounded buffered reads. The file's size
/// (from its metadata) bounds every count and tensor extent.
pub fn parse_file(path: &Path, caps: &Caps) -> Result<GgufFile, GgufError> {
    let mut src = FileHeaderSource::open(path.to_path_buf())?;
    parse(&mut src, caps)
}

/// Parses a GGUF header from bytes in memory; `bytes.len()` is taken as the file size, so tensor
/// data must be present (or the slice must be as long as the file).
pub fn parse_bytes(bytes: &[u8], caps: &Caps) -> Result<GgufFile, GgufError> {
    parse(&mut SliceHeaderSource::new(bytes), caps)
}

/// A tensor info as read, before the data offset is known.
struct RawTensor {
    name: String,
    ggml_type: GgmlType,
    dims: Vec<u64>,
    rel_offset: u64,
    nbytes: u64,
    /// Where the offset field was, for errors found once the data offset is known.
    offset_at: u64,
}

fn parse<S: HeaderSource>(src: &mut S, caps: &Caps) -> Result<GgufFile, GgufError> {
    let mut magic = [0u8; 4];
    src.read_exact(&mut magic, "magic")?;
    if &magic != b"GGUF" {
        return Err(GgufError::BadMagic { found: magic });
    }
    let version = read_u32(src, "version")?;
    // A big-endian file's version (2 or 3) reads as 0x0N000000 here: low half zero. gguf-py
    // uses the same test to detect byte order.
    if version != 0 && version & 0xffff == 0 {
        return Err(GgufError::BigEndian {
            raw: version,
            swapped: version.swap_bytes(),
        });
    }
    match version {
        2 | 3 => {}
        1 => return Err(GgufError::Version1),
        v => return Err(GgufError::UnsupportedVersion { version: v }),
    }

    let tc_at = src.pos();
    let tensor_count = read_u64(src, "tensor count")?;
    check_count(
        src,
        "tensor count",
        "max_tensors",
        tensor_count,
        caps.max_tensors,
        MIN_TENSOR_INFO,
        0,
        tc_at,
    )?;
    let kv_at = src.pos();
    let kv_count = read_u64(src, "metadata kv count")?;
    // The tensor infos follow the metadata: their minimum size is already spoken for.
    let reserved = tensor_count * MIN_TENSOR_INFO;
    check_count(
        src,
        "metadata kv count",
        "max_kv",
        kv_count,
        caps.max_kv,
        MIN_KV,
        reserved,
        kv_at,
    )?;

    // One budget for the whole header: metadata strings and tensor names share the string cap.
    let mut budget = Budget::new(caps);
    let (metadata, alignment) = read_metadata(src, caps, &mut budget, kv_count)?;
    let raw = read_tensor_infos(src, caps, &mut budget, tensor_count, alignment)?;

    let header_end = src.pos();
    // alignment <= 2^32 and header_end <= the input size, so this cannot overflow for any input
    // that exists; saturating keeps it total anyway (every tensor would then be past EOF).
    let data_offset = header_end.div_ceil(alignment).saturating_mul(alignment);
    let file_size = src.size();

    let mut tensors = Vec::with_capacity(raw.len());
    for t in raw {
        let start = data_offset.checked_add(t.rel_offset);
        let end = start.and_then(|s| s.checked_add(t.nbytes));
        let offset = match (start, end) {
            (Some(s), Some(e)) if e <= file_size => s,
            _ => {
                return Err(GgufError::TensorPastEof {
                    tensor: t.name,
                    start: start.unwrap_or(u64::MAX),
                    nbytes: t.nbytes,
                    file_size,
                    at: t.offset_at,
                })
            }
        };
        tensors.push(TensorInfo {
            name: t.name,
            ggml_type: t.ggml_type,
            dims: t.dims,
            offset,
            nbytes: t.nbytes,
        });
    }

    Ok(GgufFile {
        version,
        alignment,
        metadata,
        tensors,
        data_offset,
        file_size,
    })
}

/// Checks a count read at `at` against its cap and against what the bytes after the current
/// position (less `reserved` bytes already spoken for) can hold at `min_each` bytes per item.
#[allow(clippy::too_many_arguments)]
fn check_count<S: HeaderSource>(
    src: &S,
    what: &'static str,
    cap_name: &'static str,
    count: u64,
    cap: u64,
    min_each: u64,
    reserved: u64,
    at: u64,
) -> Result<(), GgufError> {
    if count > cap {
        return Err(GgufError::CountOverCap {
            what,
            cap_name,
            count,
            cap,
            at,
        });
    }
    let remaining = src.remaining().saturating_sub(reserved);
    if count > remaining / min_each {
        return Err(GgufError::CountOverFile {
            what,
            count,
            min_each,
            remaining,
            at,
        });
    }
    Ok(())
}

/// Reads `count` metadata pairs; returns them in file order with the alignment they declare.
fn read_metadata<S: HeaderSource>(
    src: &mut S,
    caps: &Caps,
    budget: &mut Budget,
    count: u64,
) -> Result<(Vec<(String, Value)>, u64), GgufError> {
    let mut metadata = Vec::with_capacity(count.min(256) as usize);
    let mut seen: HashMap<String, u64> = HashMap::new();
    let mut alignment = DEFAULT_ALIGNMENT;
    for i in 0..count {
        let at = src.pos();
        let key_bytes = read_string_bytes(src, caps, budget, || format!("metadata key #{i}"))?;
        let key = String::from_utf8(key_bytes).map_err(|_| GgufError::InvalidUtf8 {
            what: format!("metadata key #{i}"),
            at,
        })?;
        if let Some(&first_at) = seen.get(&key) {
            return Err(GgufError::DuplicateKey { key, at, first_at });
        }
        let ty_at = src.pos();
        let ty = read_u32(src, "metadata value type")?;
        let value = read_value(src, caps, &key, ty, ty_at, budget)?;
        if key == "general.alignment" {
            // gguf-py and llama.cpp both insist on UINT32 here.
            let Value::U32(a) = value else {
                return Err(GgufError::AlignmentType {
                    found: value_type_name(ty).unwrap_or("unknown"),
                    at: ty_at,
                });
            };
            if a == 0 || !a.is_power_of_two() {
                return Err(GgufError::BadAlignment {
                    value: a.into(),
                    at: ty_at + 4,
                });
            }
            alignment = a.into();
        }
        seen.insert(key.clone(), at);
        metadata.push((key, value));
    }
    Ok((metadata, alignment))
}

/// Reads `count` tensor infos, checking everything that does not need the data offset.
fn read_tensor_infos<S: HeaderSource>(
    src: &mut S,
    caps: &Caps,
    budget: &mut Budget,
    count: u64,
    alignment: u64,
) -> Result<Vec<RawTensor>, GgufError> {
    let mut out = Vec::with_capacity(count.min(1024) as usize);
    let mut seen: HashMap<String, u64> = HashMap::new();
    for i in 0..count {
        let at = src.pos();
        let name_bytes = read_string_bytes(src, caps, budget, || format!("tensor #{i} name"))?;
        let name = String::from_utf8(name_bytes).map_err(|_| GgufError::InvalidUtf8 {
            what: format!("tensor #{i} name"),
            at,
        })?;
        if let Some(&first_at) = seen.get(&name) {
            return Err(GgufError::DuplicateTensor {
                tensor: name,
                at,
                first_at,
            });
        }

        let nd_at = src.pos();
        let n_dims = read_u32(src, "tensor n_dims")?;
        if n_dims == 0 || n_dims > caps.max_dims {
            return Err(GgufError::BadDimCount {
                tensor: name,
                n_dims,
                max: caps.max_dims,
                at: nd_at,
            });
        }
        let mut dims = Vec::with_capacity(n_dims.min(8) as usize);
        for index in 0..n_dims {
            let d_at = src.pos();
            let d = read_u64(src, "tensor dim")?;
            if d == 0 {
                return Err(GgufError::ZeroDim {
                    tensor: name,
                    index,
                    at: d_at,
                });
            }
            dims.push(d);
        }
        let dims_at = nd_at + 4;
        let Some(n_elems) = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)) else {
            return Err(GgufError::ElemCountOverflow {
                tensor: name,
                dims,
                at: dims_at,
            });
        };

        let ty_at = src.pos();
        let id = read_u32(src, "tensor type")?;
        let Some(ggml_type) = GgmlType::from_id(id) else {
            return Err(GgufError::UnknownTensorType {
                tensor: name,
                id,
                at: ty_at,
            });
        };
        let dim0 = dims.first().copied().unwrap_or(1);
        if dim0 % ggml_type.block_elems() != 0 {
            return Err(GgufError::NotBlockMultiple {
                tensor: name,
                ty: ggml_type.name(),
                dim0,
                block: ggml_type.block_elems(),
                at: dims_at,
            });
        }
        let Some(nbytes) = ggml_type.bytes_for(n_elems) else {
            return Err(GgufError::NBytesOverflow {
                tensor: name,
                ty: ggml_type.name(),
                n_elems,
                at: dims_at,
            });
        };

        let offset_at = src.pos();
        let rel_offset = read_u64(src, "tensor offset")?;
        if rel_offset % alignment != 0 {
            return Err(GgufError::MisalignedTensor {
                tensor: name,
                offset: rel_offset,
                alignment,
                at: offset_at,
            });
        }
        seen.insert(name.clone(), at);
        out.push(RawTensor {
            name,
            ggml_type,
            dims,
            rel_offset,
            nbytes,
            offset_at,
        });
    }
    Ok(out)
}
