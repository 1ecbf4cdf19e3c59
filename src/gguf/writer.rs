//! PLACEHOLDER (skeleton): a streaming GGUF writer (header, then tensor data written or left as
//! holes) lands with `ds4 gen-model` in the foundation issue.
