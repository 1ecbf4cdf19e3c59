//! `ds4 gen-model`: deterministic DS4-layout GGUF files (tiny / demo / flash scale).
//! PLACEHOLDER (skeleton): lands with the foundation issue.
