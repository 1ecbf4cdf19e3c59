//! Reading metadata values: the 13 GGUF value types, arrays nested to any depth.
//!
//! Arrays are read with an explicit stack rather than recursion, so the nesting cap bounds work
//! and memory but never the thread's stack. Every array length is checked against the cap, the
//! remaining-value budget and what the rest of the file can hold at the element type's minimum
//! encoded size before a single element is read.

use super::header_source::HeaderSource;
use super::{Caps, GgufError, Value};

/// GGUF value type ids (gguf-py `GGUFValueType`).
pub(crate) const T_UINT8: u32 = 0;
pub(crate) const T_INT8: u32 = 1;
pub(crate) const T_UINT16: u32 = 2;
pub(crate) const T_INT16: u32 = 3;
pub(crate) const T_UINT32: u32 = 4;
pub(crate) const T_INT32: u32 = 5;
pub(crate) const T_FLOAT32: u32 = 6;
pub(crate) const T_BOOL: u32 = 7;
pub(crate) const T_STRING: u32 = 8;
pub(crate) const T_ARRAY: u32 = 9;
pub(crate) const T_UINT64: u32 = 10;
pub(crate) const T_INT64: u32 = 11;
pub(crate) const T_FLOAT64: u32 = 12;

/// gguf-py's names of the value types (`GGUFValueType`), indexed by type id: the one table of
/// value type names (messages, `ds4 inspect`, the writer's errors all use it).
const TYPE_NAMES: [&str; 13] = [
    "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32", "BOOL", "STRING", "ARRAY",
    "UINT64", "INT64", "FLOAT64",
];

/// The gguf-py name of a value type id, or `None` if the id is unknown.
pub fn value_type_name(id: u32) -> Option<&'static str> {
    TYPE_NAMES.get(id as usize).copied()
}

impl Value {
    /// The GGUF value type id of this value (what the file stores before it).
    pub fn gguf_type(&self) -> u32 {
        match self {
            Value::U8(_) => T_UINT8,
            Value::I8(_) => T_INT8,
            Value::U16(_) => T_UINT16,
            Value::I16(_) => T_INT16,
            Value::U32(_) => T_UINT32,
            Value::I32(_) => T_INT32,
            Value::F32(_) => T_FLOAT32,
            Value::Bool(_) => T_BOOL,
            Value::String(_) => T_STRING,
            Value::Array(_) => T_ARRAY,
            Value::U64(_) => T_UINT64,
            Value::I64(_) => T_INT64,
            Value::F64(_) => T_FLOAT64,
        }
    }

    /// The GGUF value type name as gguf-py spells it (`UINT32`, `STRING`, `ARRAY`, ...).
    pub fn type_name(&self) -> &'static str {
        value_type_name(self.gguf_type()).unwrap_or("unknown")
    }
}

/// Smallest encoding of one value of a type: a string is at least its u64 length, an array at
/// least its u32 element type and u64 length.
fn min_encoded_size(id: u32) -> u64 {
    match id {
        T_UINT8 | T_INT8 | T_BOOL => 1,
        T_UINT16 | T_INT16 => 2,
        T_UINT32 | T_INT32 | T_FLOAT32 => 4,
        T_UINT64 | T_INT64 | T_FLOAT64 | T_STRING => 8,
        _ => 12, // T_ARRAY; unknown ids are rejected before this is asked
    }
}

macro_rules! read_le {
    ($name:ident, $t:ty) => {
        pub(crate) fn $name<S: HeaderSource>(
            src: &mut S,
            what: &'static str,
        ) -> Result<$t, GgufError> {
            let mut b = [0u8; std::mem::size_of::<$t>()];
            src.read_exact(&mut b, what)?;
            Ok(<$t>::from_le_bytes(b))
        }
    };
}
read_le!(read_u8, u8);
read_le!(read_i8, i8);
read_le!(read_u16, u16);
read_le!(read_i16, i16);
read_le!(read_u32, u32);
read_le!(read_i32, i32);
read_le!(read_u64, u64);
read_le!(read_i64, i64);
read_le!(read_f32, f32);
read_le!(read_f64, f64);

/// What the rest of the header may still decode: values (each costs a [`Value`] in memory)
/// and string bytes (each kept in memory). One budget spans the whole header.
pub(crate) struct Budget {
    values: u64,
    string_bytes: u64,
}

impl Budget {
    pub(crate) fn new(caps: &Caps) -> Self {
        Self {
            values: caps.max_metadata_values,
            string_bytes: caps.max_string_bytes,
        }
    }
}

/// Reads a GGUF string (u64 length + bytes) after checking the length against the caps (one
/// string, all strings together) and the bytes left. `what` names the string for errors and is
/// only built on failure.
pub(crate) fn read_string_bytes<S: HeaderSource>(
    src: &mut S,
    caps: &Caps,
    budget: &mut Budget,
    what: impl Fn() -> String,
) -> Result<Vec<u8>, GgufError> {
    let at = src.pos();
    let len = read_u64(src, "string length")?;
    if len > caps.max_string {
        return Err(GgufError::StringOverCap {
            what: what(),
            len,
            cap: caps.max_string,
            at,
        });
    }
    if len > budget.string_bytes {
        return Err(GgufError::StringBytesOverCap {
            what: what(),
            len,
            left: budget.string_bytes,
            cap: caps.max_string_bytes,
            at,
        });
    }
    if len > src.remaining() {
        return Err(GgufError::StringOverFile {
            what: what(),
            len,
            remaining: src.remaining(),
            at,
        });
    }
    // len <= remaining <= size of a slice or file we could stat, and <= max_string: the
    // allocation is bounded by both.
    let len = usize::try_from(len).map_err(|_| GgufError::StringOverFile {
        what: what(),
        len,
        remaining: src.remaining(),
        at,
    })?;
    let mut buf = vec![0u8; len];
    src.read_exact(&mut buf, "string bytes")?;
    // len <= string_bytes was checked above.
    budget.string_bytes -= buf.len() as u64;
    Ok(buf)
}

/// One array being filled: its element type, elements still to read, and those read.
struct Frame {
    elem: u32,
    left: u64,
    items: Vec<Value>,
}

/// Reads the value of type `ty` (whose type field was at `ty_at`) for metadata key `key`.
/// `budget` is what the rest of the header may still decode.
pub(crate) fn read_value<S: HeaderSource>(
    src: &mut S,
    caps: &Caps,
    key: &str,
    ty: u32,
    ty_at: u64,
    budget: &mut Budget,
) -> Result<Value, GgufError> {
    take_budget(budget, 1, caps, key, ty_at)?;
    if ty != T_ARRAY {
        return read_scalar(src, caps, budget, key, ty, ty_at);
    }
    let mut stack: Vec<Frame> = Vec::with_capacity(4);
    stack.push(open_array(src, caps, key, 1, budget)?);
    loop {
        let Some(top) = stack.last_mut() else {
            // Unreachable: the loop returns when it pops the outermost frame.
            return Ok(Value::Array(Vec::new()));
        };
        if top.left == 0 {
            let done = Value::Array(std::mem::take(&mut top.items));
            stack.pop();
            match stack.last_mut() {
                Some(parent) => parent.items.push(done),
                None => return Ok(done),
            }
            continue;
        }
        top.left -= 1;
        if top.elem == T_ARRAY {
            let depth = stack.len() as u64 + 1;
            if depth > u64::from(caps.max_depth) {
                return Err(GgufError::TooDeep {
                    key: key.to_owned(),
                    cap: caps.max_depth,
                    at: src.pos(),
                });
            }
            let frame = open_array(src, caps, key, depth, budget)?;
            stack.push(frame);
        } else {
            let at = src.pos();
            let v = read_scalar(src, caps, budget, key, top.elem, at)?;
            top.items.push(v);
        }
    }
}

fn take_budget(
    budget: &mut Budget,
    n: u64,
    caps: &Caps,
    key: &str,
    at: u64,
) -> Result<(), GgufError> {
    budget.values = budget
        .values
        .checked_sub(n)
        .ok_or_else(|| GgufError::TooManyValues {
            key: key.to_owned(),
            cap: caps.max_metadata_values,
            at,
        })?;
    Ok(())
}

/// Reads an array header (element type, length) and checks the length before anything is
/// allocated for it. The array value itself was already charged to the budget by the caller
/// (the top level) or is charged here (nested: `depth > 1`).
fn open_array<S: HeaderSource>(
    src: &mut S,
    caps: &Caps,
    key: &str,
    depth: u64,
    budget: &mut Budget,
) -> Result<Frame, GgufError> {
    let at = src.pos();
    if depth > 1 {
        take_budget(budget, 1, caps, key, at)?;
    }
    let elem = read_u32(src, "array element type")?;
    let Some(elem_name) = value_type_name(elem) else {
        return Err(GgufError::UnknownValueType {
            key: key.to_owned(),
            id: elem,
            at,
        });
    };
    let len_at = src.pos();
    let len = read_u64(src, "array length")?;
    if len > caps.max_array {
        return Err(GgufError::ArrayOverCap {
            key: key.to_owned(),
            len,
            cap: caps.max_array,
            at: len_at,
        });
    }
    let min_each = min_encoded_size(elem);
    if len > src.remaining() / min_each {
        return Err(GgufError::ArrayOverFile {
            key: key.to_owned(),
            len,
            elem: elem_name,
            min_each,
            remaining: src.remaining(),
            at: len_at,
        });
    }
    // Nested arrays charge themselves when opened; scalar elements are charged all at once.
    if elem != T_ARRAY {
        take_budget(budget, len, caps, key, len_at)?;
    } else if len > budget.values {
        return Err(GgufError::TooManyValues {
            key: key.to_owned(),
            cap: caps.max_metadata_values,
            at: len_at,
        });
    }
    Ok(Frame {
        elem,
        left: len,
        // Never trust the count for a reservation beyond a small prefix.
        items: Vec::with_capacity(len.min(1024) as usize),
    })
}

/// Reads one non-array value.
fn read_scalar<S: HeaderSource>(
    src: &mut S,
    caps: &Caps,
    budget: &mut Budget,
    key: &str,
    ty: u32,
    at: u64,
) -> Result<Value, GgufError> {
    Ok(match ty {
        T_UINT8 => Value::U8(read_u8(src, "UINT8 value")?),
        T_INT8 => Value::I8(read_i8(src, "INT8 value")?),
        T_UINT16 => Value::U16(read_u16(src, "UINT16 value")?),
        T_INT16 => Value::I16(read_i16(src, "INT16 value")?),
        T_UINT32 => Value::U32(read_u32(src, "UINT32 value")?),
        T_INT32 => Value::I32(read_i32(src, "INT32 value")?),
        T_FLOAT32 => Value::F32(read_f32(src, "FLOAT32 value")?),
        // Like llama.cpp and gguf-py, any non-zero byte is true.
        T_BOOL => Value::Bool(read_u8(src, "BOOL value")? != 0),
        T_UINT64 => Value::U64(read_u64(src, "UINT64 value")?),
        T_INT64 => Value::I64(read_i64(src, "INT64 value")?),
        T_FLOAT64 => Value::F64(read_f64(src, "FLOAT64 value")?),
        T_STRING => {
            let bytes =
                read_string_bytes(src, caps, budget, || format!("metadata key {key:?} value"))?;
            // String values are data, not identifiers: invalid UTF-8 (seen in some tokenizer
            // vocabularies) is kept readable with U+FFFD rather than rejecting the model.
            Value::String(match String::from_utf8(bytes) {
                Ok(s) => s,
                Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
            })
        }
        _ => {
            return Err(GgufError::UnknownValueType {
                key: key.to_owned(),
                id: ty,
                at,
            })
        }
    })
}
