//! The ggml tensor type table: id, name (as gguf-py 0.19 spells it), block elements, block bytes.
//!
//! Sizes follow gguf-py's `GGML_QUANT_SIZES`; `tests/gguf_types.rs` checks this table against
//! gguf-py itself (ids, names, block sizes), so a drift in either direction fails the tests.
//! Ids 4, 5 (removed Q4_2/Q4_3) and 31-33, 36-38 (removed or repacked types) are not types.

/// A ggml tensor element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
    NVFP4,
    Q1_0,
}

use GgmlType::*;

/// (type, id, name, block elements, block bytes)
const TABLE: &[(GgmlType, u32, &str, u64, u64)] = &[
    (F32, 0, "F32", 1, 4),
    (F16, 1, "F16", 1, 2),
    (Q4_0, 2, "Q4_0", 32, 18),
    (Q4_1, 3, "Q4_1", 32, 20),
    (Q5_0, 6, "Q5_0", 32, 22),
    (Q5_1, 7, "Q5_1", 32, 24),
    (Q8_0, 8, "Q8_0", 32, 34),
    (Q8_1, 9, "Q8_1", 32, 40),
    (Q2_K, 10, "Q2_K", 256, 84),
    (Q3_K, 11, "Q3_K", 256, 110),
    (Q4_K, 12, "Q4_K", 256, 144),
    (Q5_K, 13, "Q5_K", 256, 176),
    (Q6_K, 14, "Q6_K", 256, 210),
    (Q8_K, 15, "Q8_K", 256, 292),
    (IQ2_XXS, 16, "IQ2_XXS", 256, 66),
    (IQ2_XS, 17, "IQ2_XS", 256, 74),
    (IQ3_XXS, 18, "IQ3_XXS", 256, 98),
    (IQ1_S, 19, "IQ1_S", 256, 50),
    (IQ4_NL, 20, "IQ4_NL", 32, 18),
    (IQ3_S, 21, "IQ3_S", 256, 110),
    (IQ2_S, 22, "IQ2_S", 256, 82),
    (IQ4_XS, 23, "IQ4_XS", 256, 136),
    (I8, 24, "I8", 1, 1),
    (I16, 25, "I16", 1, 2),
    (I32, 26, "I32", 1, 4),
    (I64, 27, "I64", 1, 8),
    (F64, 28, "F64", 1, 8),
    (IQ1_M, 29, "IQ1_M", 256, 56),
    (BF16, 30, "BF16", 1, 2),
    (TQ1_0, 34, "TQ1_0", 256, 54),
    (TQ2_0, 35, "TQ2_0", 256, 66),
    (MXFP4, 39, "MXFP4", 32, 17),
    (NVFP4, 40, "NVFP4", 64, 36),
    (Q1_0, 41, "Q1_0", 128, 18),
];

impl GgmlType {
    fn row(self) -> &'static (GgmlType, u32, &'static str, u64, u64) {
        TABLE
            .iter()
            .find(|r| r.0 == self)
            .expect("every variant is in TABLE")
    }

    /// Every known type, in id order.
    pub fn all() -> impl Iterator<Item = GgmlType> {
        TABLE.iter().map(|r| r.0)
    }

    /// The type for a GGUF type id, or `None` for an unknown id.
    pub fn from_id(id: u32) -> Option<Self> {
        TABLE.iter().find(|r| r.1 == id).map(|r| r.0)
    }

    /// The type for a gguf-py name (`"IQ2_XXS"`), case-insensitive.
    pub fn from_name(name: &str) -> Option<Self> {
        TABLE
            .iter()
            .find(|r| r.2.eq_ignore_ascii_case(name))
            .map(|r| r.0)
    }

    pub fn id(self) -> u32 {
        self.row().1
    }

    /// The name as gguf-py spells it.
    pub fn name(self) -> &'static str {
        self.row().2
    }

    /// Elements per block (1 for plain types).
    pub fn block_elems(self) -> u64 {
        self.row().3
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> u64 {
        self.row().4
    }

    /// Bytes of `n_elems` elements along dim0; `None` if `n_elems` is not a multiple of the
    /// block size or the product overflows.
    pub fn bytes_for(self, n_elems: u64) -> Option<u64> {
        if n_elems % self.block_elems() != 0 {
            return None;
        }
        (n_elems / self.block_elems()).checked_mul(self.block_bytes())
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
