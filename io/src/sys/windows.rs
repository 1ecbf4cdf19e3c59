//! Windows per-worker handles (in progress).
