//! Why filling expert-cache slots failed, typed, so the programs can tell a cache the user sized
//! too small (bad input, exit 2) from a device or OS failure (a runtime error, exit 1: a GPU out
//! of memory is not a usage error).

use crate::device::DeviceError;
use crate::expert_cache::CacheError;
use crate::model::ModelError;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The expert cache refused (too small or too large for its slot numbers, full, or a slot
    /// in the wrong state).
    #[error("{what}")]
    Cache {
        what: String,
        #[source]
        source: CacheError,
    },
    /// Every slot is held by one layer's experts and the reads in flight: the cache is smaller
    /// than what a layer needs at once.
    #[error("expert cache: all {slots} slots are held by layer {layer}'s experts{inflight}")]
    Held {
        layer: usize,
        slots: usize,
        /// Empty or ", and reads in flight".
        inflight: &'static str,
    },
    /// The model does not lay out as the loader needs (no layers, an expert outside a tensor,
    /// a slab whose size overflows).
    #[error("{what}")]
    Layout {
        what: String,
        #[source]
        source: Option<ModelError>,
    },
    /// A device call failed: allocation (out of memory), copy or event.
    #[error("{what}")]
    Device {
        what: String,
        #[source]
        source: DeviceError,
    },
    /// An OS call failed (opening the model again, starting a worker).
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A read of expert bytes failed (the C-engine pattern's workers, which read with pread).
    #[error("{0}")]
    Read(String),
    /// The loader's own bookkeeping broke (a slot marked resident with no bytes): a bug.
    #[error("internal: {0}")]
    Internal(String),
}

impl LoadError {
    /// Bad input (the cache size, the model file): exit 2. The rest are runtime failures.
    pub fn is_bad_input(&self) -> bool {
        match self {
            LoadError::Cache { source, .. } => !matches!(source, CacheError::NotLoading { .. }),
            LoadError::Held { .. } | LoadError::Layout { .. } => true,
            LoadError::Device { .. }
            | LoadError::Io { .. }
            | LoadError::Read(_)
            | LoadError::Internal(_) => false,
        }
    }
    pub(crate) fn cache(what: impl Into<String>) -> impl FnOnce(CacheError) -> LoadError {
        let what = what.into();
        move |source| LoadError::Cache { what, source }
    }
    pub(crate) fn device(what: impl Into<String>) -> impl FnOnce(DeviceError) -> LoadError {
        let what = what.into();
        move |source| LoadError::Device { what, source }
    }
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LoadError {
        let what = what.into();
        move |source| LoadError::Io { what, source }
    }
    pub(crate) fn layout(what: impl Into<String>) -> LoadError {
        LoadError::Layout {
            what: what.into(),
            source: None,
        }
    }
    pub(crate) fn slice(what: impl Into<String>) -> impl FnOnce(ModelError) -> LoadError {
        let what = what.into();
        move |source| LoadError::Layout {
            what,
            source: Some(source),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::DecodeError;

    #[test]
    fn a_cache_too_small_is_bad_input_and_out_of_memory_is_not() {
        let small = DecodeError::from(LoadError::cache("expert cache")(CacheError::TooSmall {
            slots: 2,
            k: 6,
        }));
        assert!(small.is_bad_input(), "{small}");
        let held = DecodeError::from(LoadError::Held {
            layer: 3,
            slots: 6,
            inflight: "",
        });
        assert!(held.is_bad_input());
        assert_eq!(
            held.to_string(),
            "expert cache: all 6 slots are held by layer 3's experts"
        );
        // A GPU out of memory is a runtime failure: exit 1, not 2 (it was bad input when every
        // load error was a string).
        let oom = DecodeError::from(LoadError::device("gpu expert slab")(
            DeviceError::OutOfMemory {
                bytes: 1 << 30,
                what: "device memory",
            },
        ));
        assert!(!oom.is_bad_input(), "{oom}");
        assert_eq!(oom.to_string(), "gpu expert slab");
        let cause = std::error::Error::source(&oom);
        assert!(cause.is_some_and(|c| c.to_string().contains("out of device memory")));
        let bug = DecodeError::from(LoadError::cache("expert cache")(CacheError::NotLoading {
            slot: 1,
        }));
        assert!(!bug.is_bad_input());
    }
}
