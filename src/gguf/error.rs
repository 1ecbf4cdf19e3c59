//! Every way a GGUF header can be rejected, as one typed enum.
//!
//! Each format error says what was wrong, the values involved and the byte offset of the field
//! that was being read (`at byte N`), so a user can look at the file with a hex dump. Format
//! errors carry no path (the parser may run over bytes in memory); IO errors from
//! [`parse_file`](super::parse_file) do, with the offset and length of the read that failed.

use std::path::PathBuf;

/// Why a GGUF header was rejected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// The file could not be opened or its size queried.
    #[error("{}: cannot open", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The path names something that is not a regular file (a directory, a FIFO, a device).
    #[error("{}: not a regular file", path.display())]
    NotAFile { path: PathBuf },

    /// A read of the header failed.
    #[error("{}: read of {len} bytes at byte {offset} failed", path.display())]
    Io {
        path: PathBuf,
        offset: u64,
        len: u64,
        #[source]
        source: std::io::Error,
    },

    /// The input ends inside the header.
    #[error(
        "truncated: {what} needs {need} bytes at byte {at}, but the file ends at byte {file_size}"
    )]
    Truncated {
        what: &'static str,
        at: u64,
        need: u64,
        file_size: u64,
    },

    #[error("not a GGUF file: magic \"{}\" at byte 0 (expected \"GGUF\")", found.escape_ascii())]
    BadMagic { found: [u8; 4] },

    #[error("big-endian GGUF is not supported (version field {raw:#010x} at byte 4 reads as {swapped} byte-swapped)")]
    BigEndian { raw: u32, swapped: u32 },

    #[error("GGUF v1 is not supported (only v2 and v3: v1 uses 32-bit counts; re-convert the model) at byte 4")]
    Version1,

    #[error("unsupported GGUF version {version} at byte 4 (supported: 2, 3)")]
    UnsupportedVersion { version: u32 },

    /// A count (tensors, metadata pairs) is larger than its named cap.
    #[error("{what} {count} exceeds cap {cap_name}={cap} at byte {at}")]
    CountOverCap {
        what: &'static str,
        cap_name: &'static str,
        count: u64,
        cap: u64,
        at: u64,
    },

    /// A count is larger than what the rest of the file could hold at the minimum size per item:
    /// the header lies, and we find out before allocating anything proportional to it.
    #[error("{what} {count} exceeds what {remaining} bytes can hold ({min_each} bytes each at least) at byte {at}")]
    CountOverFile {
        what: &'static str,
        count: u64,
        min_each: u64,
        remaining: u64,
        at: u64,
    },

    #[error("{what}: string length {len} exceeds cap max_string={cap} at byte {at}")]
    StringOverCap {
        what: String,
        len: u64,
        cap: u64,
        at: u64,
    },

    #[error(
        "{what}: string length {len} exceeds the {remaining} bytes left in the file at byte {at}"
    )]
    StringOverFile {
        what: String,
        len: u64,
        remaining: u64,
        at: u64,
    },

    #[error("{what}: string length {len} exceeds the {left} bytes left of cap max_string_bytes={cap} (all header strings together) at byte {at}")]
    StringBytesOverCap {
        what: String,
        len: u64,
        left: u64,
        cap: u64,
        at: u64,
    },

    #[error("{what} is not valid UTF-8 (at byte {at})")]
    InvalidUtf8 { what: String, at: u64 },

    #[error("metadata key {key:?}: array length {len} exceeds cap max_array={cap} at byte {at}")]
    ArrayOverCap {
        key: String,
        len: u64,
        cap: u64,
        at: u64,
    },

    #[error("metadata key {key:?}: array of {len} {elem} ({min_each} bytes each at least) exceeds the {remaining} bytes left in the file at byte {at}")]
    ArrayOverFile {
        key: String,
        len: u64,
        elem: &'static str,
        min_each: u64,
        remaining: u64,
        at: u64,
    },

    #[error("metadata key {key:?}: more than max_metadata_values={cap} metadata values in total at byte {at}")]
    TooManyValues { key: String, cap: u64, at: u64 },

    #[error("metadata key {key:?}: arrays nested deeper than cap max_depth={cap} at byte {at}")]
    TooDeep { key: String, cap: u32, at: u64 },

    #[error("metadata key {key:?}: unknown value type {id} at byte {at}")]
    UnknownValueType { key: String, id: u32, at: u64 },

    #[error("duplicate metadata key {key:?} at byte {at} (first at byte {first_at})")]
    DuplicateKey { key: String, at: u64, first_at: u64 },

    #[error("general.alignment has type {found}, expected UINT32 (at byte {at})")]
    AlignmentType { found: &'static str, at: u64 },

    #[error("general.alignment {value} is not a non-zero power of two (at byte {at})")]
    BadAlignment { value: u64, at: u64 },

    #[error("tensor {tensor:?}: n_dims {n_dims} is not in 1..={max} at byte {at}")]
    BadDimCount {
        tensor: String,
        n_dims: u32,
        max: u32,
        at: u64,
    },

    #[error("tensor {tensor:?}: dim {index} is 0 at byte {at}")]
    ZeroDim { tensor: String, index: u32, at: u64 },

    #[error("tensor {tensor:?}: element count of dims {dims:?} overflows u64 at byte {at}")]
    ElemCountOverflow {
        tensor: String,
        dims: Vec<u64>,
        at: u64,
    },

    #[error("tensor {tensor:?}: unknown ggml type id {id} at byte {at}")]
    UnknownTensorType { tensor: String, id: u32, at: u64 },

    #[error("tensor {tensor:?}: dim0 {dim0} is not a multiple of {ty}'s block size {block} at byte {at}")]
    NotBlockMultiple {
        tensor: String,
        ty: &'static str,
        dim0: u64,
        block: u64,
        at: u64,
    },

    #[error("tensor {tensor:?}: byte size of {n_elems} {ty} elements overflows u64 at byte {at}")]
    NBytesOverflow {
        tensor: String,
        ty: &'static str,
        n_elems: u64,
        at: u64,
    },

    #[error("tensor {tensor:?}: data offset {offset} is not a multiple of the alignment {alignment} at byte {at}")]
    MisalignedTensor {
        tensor: String,
        offset: u64,
        alignment: u64,
        at: u64,
    },

    #[error("duplicate tensor name {tensor:?} at byte {at} (first at byte {first_at})")]
    DuplicateTensor {
        tensor: String,
        at: u64,
        first_at: u64,
    },

    #[error("tensor {tensor:?}: data [{start}, {start}+{nbytes}) ends past the end of the file ({file_size} bytes); offset field at byte {at}")]
    TensorPastEof {
        tensor: String,
        /// Absolute start (saturated at `u64::MAX` if data offset + relative offset overflows).
        start: u64,
        nbytes: u64,
        file_size: u64,
        at: u64,
    },
}

impl GgufError {
    /// The path, for errors that came from the file system (open, stat, read).
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            GgufError::Open { path, .. }
            | GgufError::NotAFile { path }
            | GgufError::Io { path, .. } => Some(path),
            _ => None,
        }
    }

    /// True when the file content is malformed (as opposed to the file being unreadable).
    pub fn is_format_error(&self) -> bool {
        !matches!(
            self,
            GgufError::Open { .. } | GgufError::NotAFile { .. } | GgufError::Io { .. }
        )
    }
}
