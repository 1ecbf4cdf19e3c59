//! Stress, fault and fuzz support: the engine of `ds4-stress` (random reads through the engine
//! against patterned files, every byte verified, faults injected through `ds4_io::fault`,
//! cancellation and shutdown storms), a device wrapper that counts staging and device bytes
//! (resource-leak checks), and the checks behind the fuzz targets.
//!
//! Why in the library and not in tests only: the `ds4-stress` binary, the fuzz crate and the
//! integration tests all drive the same code, so a CI stress run, a fuzz crash replay and a
//! long manual run check the same properties. Limits: see each submodule.

pub mod fuzz;
