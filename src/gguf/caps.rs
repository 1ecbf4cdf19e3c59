//! Named caps on every count, length and depth read from a GGUF header.
//!
//! The parser checks each number it reads against two bounds before using it: the cap here (a
//! sanity limit far above any real model) and what the rest of the file can physically hold at
//! the minimum encoded size per item. The second bound means a lying count fails at once, before
//! any allocation proportional to it; the caps bound memory on large but honest-looking files.

/// Limits the parser enforces. [`Caps::default`] accepts every real GGUF we know of (the
/// DeepSeek V4 Flash file has ~2,000 tensors, ~60 metadata keys and 129,280-entry tokenizer
/// arrays) with wide margins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Most tensors in the tensor table.
    pub max_tensors: u64,
    /// Most metadata key/value pairs.
    pub max_kv: u64,
    /// Longest string (metadata key, string value, tensor name), in bytes.
    pub max_string: u64,
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
            max_tensors: 1 << 20,
            max_kv: 1 << 20,
            max_string: 1 << 24,
            max_array: 1 << 22,
            max_metadata_values: 1 << 22,
            max_depth: 8,
            max_dims: 4,
        }
    }
}
