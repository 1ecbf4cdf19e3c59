//! Handles as ids, never pointers: a C caller can pass a closed, freed, made-up or wrong-kind
//! handle, and each of those must be a `DS4S_ERR_BAD_HANDLE`, not undefined behaviour.
//!
//! An id is `kind << 56 | n` with `n` from one process-wide counter that never repeats (2^56
//! ids), so an id is never reused: a stale id can only miss. The kind byte lets the message say
//! "this is a completion, not a model handle". Lookups are a `HashMap` under a mutex (held only
//! for the lookup, never across IO).

use crate::error::{Failure, DS4S_ERR_BAD_HANDLE};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// What an id names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Model = 1,
    Completion = 2,
    Lease = 3,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Model => "model handle",
            Kind::Completion => "completion",
            Kind::Lease => "expert lease",
        }
    }
    fn of(id: u64) -> Option<Kind> {
        match id >> 56 {
            1 => Some(Kind::Model),
            2 => Some(Kind::Completion),
            3 => Some(Kind::Lease),
            _ => None,
        }
    }
}

static NEXT: AtomicU64 = AtomicU64::new(1);

/// Live objects of one kind, by id.
pub struct Registry<T> {
    kind: Kind,
    map: Mutex<HashMap<u64, T>>,
}

impl<T> Registry<T> {
    pub fn new(kind: Kind) -> Self {
        Self {
            kind,
            map: Mutex::new(HashMap::new()),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, T>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stores `v` under a fresh id.
    pub fn insert(&self, v: T) -> u64 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed) & ((1 << 56) - 1);
        let id = (self.kind as u64) << 56 | n;
        self.map().insert(id, v);
        id
    }

    /// Why `id` is not a live one of ours.
    fn bad(&self, id: u64) -> Failure {
        let what = self.kind.name();
        let msg = match Kind::of(id) {
            _ if id == 0 => format!("{what} 0 is never valid"),
            Some(k) if k != self.kind => {
                format!("{id:#x} is a {}, not a {what}", k.name())
            }
            Some(_) => format!("{what} {id:#x} is not open (closed, freed or released already)"),
            None => format!("{id:#x} is not a {what} (never issued by ds4stream)"),
        };
        Failure::new(DS4S_ERR_BAD_HANDLE, msg)
    }

    pub fn remove(&self, id: u64) -> Result<T, Failure> {
        self.map().remove(&id).ok_or_else(|| self.bad(id))
    }

    /// Takes every entry out (close).
    pub fn drain(&self) -> Vec<T> {
        self.map().drain().map(|(_, v)| v).collect()
    }
}

impl<T: Clone> Registry<T> {
    pub fn get(&self, id: u64) -> Result<T, Failure> {
        self.map().get(&id).cloned().ok_or_else(|| self.bad(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_never_reused_and_bad_ones_are_named() {
        let r = Registry::new(Kind::Completion);
        let a = r.insert(1u8);
        assert_eq!(r.get(a).unwrap(), 1);
        assert_eq!(r.remove(a).unwrap(), 1);
        let b = r.insert(2u8);
        assert_ne!(a, b);
        let e = r.get(a).unwrap_err();
        assert_eq!(e.status, DS4S_ERR_BAD_HANDLE);
        assert!(e.message.contains("not open"), "{}", e.message);
        assert!(r.get(0).unwrap_err().message.contains("never valid"));
        let m = Registry::<u8>::new(Kind::Model);
        let e = m.get(b).unwrap_err().message;
        assert!(e.contains("is a completion, not a model handle"), "{e}");
        assert!(m.get(12345).unwrap_err().message.contains("never issued"));
    }
}
