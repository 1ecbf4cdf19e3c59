//! Named caps on every count, length and depth read from a GGUF header.
//!
//! The parser checks each number it reads against two bounds before using it: the cap here (a
//! sanity limit far above any real model) and what the rest of the file can physically hold at
//! the minimum encoded size per item. The second bound means a lying count fails at once, before
//! any allocation proportional to it; the caps bound memory on large but honest-looking files.

/// Limits the parser enforces. [`Caps::default`] accepts every real GGUF we know of (the
/// DeepSeek V4 Flash file has 1,328 tensors, ~50 metadata keys and 129,280-entry tokenizer
/// arrays; the largest llama.cpp models have ~1,200 tensors) with wide margins: 65,536 tensors
/// and keys. The tensor cap also bounds what commands do per tensor (`ds4 inspect --json` builds
/// ~1 KiB per tensor; a valid file of 2^20 tensors took 1.4 GB and 9 s).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Most tensors in the tensor table.
    pub max_tensors: u64,
    /// Most metadata key/value pairs.
    pub max_kv: u64,
    /// Longest string (metadata key, string value, tensor name), in bytes.
    pub max_string: u64,
    /// Most string bytes in total over the whole header (metadata keys, string values, tensor
    /// names). Strings are kept in memory, and a sparse file makes file size free: without this
    /// a 32 GiB file of holes holding 2,000 strings of 16 MiB each would make the parser
    /// allocate 32 GiB. Real headers hold a few MiB (the Flash tokenizer is ~3 MiB).
    pub max_string_bytes: u64,
    /// Longest metadata array, in elements (each nesting level counted separately).
    pub max_array: u64,
    /// Most metadata values in total over all arrays. Every value costs one [`super::Value`]
    /// (32 bytes) in memory but as little as 1 byte in the file, so this bounds the header's
    /// decoded size independently of the file size.
    pub max_metadata_values: u64,
    /// Deepest array nesting (an array of arrays has depth 2). The parser is iterative and
    /// never recurses, but dropping or printing a [`super::Value`] does: keep this small.
    pub max_depth: u32,
    /// Most tensor dimensions (ggml supports 4).
    pub max_dims: u32,
}

impl Default for Caps {
    fn default() -> Self {
        Self {
            max_tensors: 1 << 16,
            max_kv: 1 << 16,
            max_string: 1 << 24,
            max_string_bytes: 1 << 26,
            max_array: 1 << 22,
            max_metadata_values: 1 << 22,
            max_depth: 8,
            max_dims: 4,
        }
    }
}
