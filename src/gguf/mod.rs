//! GGUF: the file format DS4 ships in. A hostile-safe reader (every count, length and offset is
//! checked against named caps and the file size before use) and the ggml type table.
//!
//! The reader parses the header (metadata + tensor infos) with sequential reads through one
//! 64 KiB buffer (so at most one buffer of read-ahead past the header); it never maps the file or
//! reads the data section. Offsets in [`TensorInfo`] are absolute file offsets.
//!
//! Files: `reader` (header layout and checks), `value` (metadata values), `header_source` (the
//! slice / file cursor), `caps`, `error`, `types` (ggml type table), `writer`.

mod caps;
mod error;
mod header_source;
mod reader;
pub mod types;
mod value;
pub mod writer;

pub use caps::Caps;
pub use error::GgufError;
pub use reader::{parse_bytes, parse_file, DEFAULT_ALIGNMENT};
pub use types::GgmlType;
pub use value::value_type_name;

/// A metadata value (every GGUF value type, arrays nested).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    /// For an array, the type name of its elements (taken from the first; `None` when the array
    /// is empty: GGUF records the element type but [`Value::Array`] does not keep it).
    pub fn elem_type_name(&self) -> Option<&'static str> {
        self.as_array()?.first().map(Value::type_name)
    }

    /// The value as an unsigned integer, if it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float, if it is any numeric type.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            Value::Bool(_) | Value::String(_) | Value::Array(_) => None,
            _ => self.as_u64().map(|v| v as f64).or(match *self {
                Value::I8(v) => Some(v.into()),
                Value::I16(v) => Some(v.into()),
                Value::I32(v) => Some(v.into()),
                Value::I64(v) => Some(v as f64),
                _ => None,
            }),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// One tensor's entry in the tensor table.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub ggml_type: GgmlType,
    /// Dimensions in GGUF order (dim0 innermost).
    pub dims: Vec<u64>,
    /// Absolute file offset of the first byte (data section start + relative offset).
    pub offset: u64,
    /// Bytes of tensor data.
    pub nbytes: u64,
}

impl TensorInfo {
    pub fn n_elems(&self) -> u64 {
        self.dims.iter().product()
    }
    /// End offset (exclusive); never overflows for a parsed tensor (checked at parse time).
    pub fn end(&self) -> u64 {
        self.offset + self.nbytes
    }
}

/// A parsed GGUF header.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufFile {
    pub version: u32,
    /// `general.alignment` (default 32).
    pub alignment: u64,
    /// Metadata in file order.
    pub metadata: Vec<(String, Value)>,
    /// Tensor table in file order.
    pub tensors: Vec<TensorInfo>,
    /// Absolute offset of the data section.
    pub data_offset: u64,
    /// Size of the file the header was parsed from.
    pub file_size: u64,
}

impl GgufFile {
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }
}
