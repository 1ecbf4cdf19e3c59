//! The expert cache through C: `ds4s_experts_acquire` / `_release` / `_prefetch`, on the
//! library's [`ExpertStore`](ds4_stream::expert_store::ExpertStore). A lease is the store's
//! `ExpertPins` kept in the handle's registry: releasing it (or closing) unpins its experts.

use crate::error::{Failure, DS4S_ERR_INTERNAL, DS4S_OK};
use crate::handle::{with_open, Open};
use crate::{put, slice_in, Ds4sExpertPtrs};
use ds4_stream::expert_store::ExpertStore;
use std::ffi::{c_int, c_void};
use std::time::Duration;

fn store(o: &Open) -> Result<&ExpertStore, Failure> {
    o.store.as_ref().ok_or_else(|| {
        Failure::invalid(
            "this handle has no expert cache: open it with ds4s_options.expert_cache_slots > 0",
        )
    })
}

/// # Safety
/// `ids` is NULL or valid for reads of `k` `uint32_t`s; `out` is NULL or valid for writes of `k`
/// `ds4s_expert_ptrs`; `lease` is NULL or valid for a write of a `ds4s_lease`.
#[no_mangle]
pub unsafe extern "C" fn ds4s_experts_acquire(
    h: u64,
    layer: u32,
    ids: *const u32,
    k: usize,
    timeout_ms: i64,
    out: *mut Ds4sExpertPtrs,
    lease: *mut u64,
) -> c_int {
    with_open("ds4s_experts_acquire", h, |hd, o| {
        let s = store(o)?;
        if k == 0 {
            return Err(Failure::invalid("k is 0: ask for at least one expert"));
        }
        // SAFETY: the header's contract for `ids`.
        let ids = unsafe { slice_in(ids, k, "ids")? };
        if out.is_null() || lease.is_null() {
            return Err(Failure::invalid("out or lease is NULL"));
        }
        let mem = s.slab().memory();
        let base = match (mem.device_addr(), mem.host_ptr()) {
            (Some(a), _) => a as usize,
            (None, Some(p)) => p.as_ptr() as usize,
            (None, None) => {
                return Err(Failure::new(
                    DS4S_ERR_INTERNAL,
                    "expert slab has no address",
                ))
            }
        };
        let limit = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
        let pins = s.acquire(layer, ids, limit)?;
        let at = |r: &std::ops::Range<usize>| (base + r.start) as *mut c_void;
        for (i, l) in pins.locations().iter().enumerate() {
            let v = Ds4sExpertPtrs {
                gate: at(&l.gate),
                up: at(&l.up),
                down: at(&l.down),
                gate_bytes: l.gate.len() as u64,
                up_bytes: l.up.len() as u64,
                down_bytes: l.down.len() as u64,
                slot: l.slot,
                reserved: 0,
            };
            // SAFETY: `out` is non-null and the caller promised room for k entries; i < k.
            unsafe { out.add(i).write_unaligned(v) };
        }
        let id = hd.leases.insert(pins);
        // SAFETY: checked non-null; the caller promised room for a lease id.
        unsafe { put(lease, id, "lease")? };
        Ok(DS4S_OK)
    })
}

#[no_mangle]
pub extern "C" fn ds4s_experts_release(h: u64, lease: u64) -> c_int {
    crate::handle::with_handle("ds4s_experts_release", h, |hd| {
        drop(hd.leases.remove(lease)?);
        Ok(DS4S_OK)
    })
}

/// # Safety
/// `ids` is NULL or valid for reads of `k` `uint32_t`s; `started` is NULL or valid for a write
/// of a `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn ds4s_experts_prefetch(
    h: u64,
    layer: u32,
    ids: *const u32,
    k: usize,
    started: *mut u32,
) -> c_int {
    with_open("ds4s_experts_prefetch", h, |_, o| {
        let s = store(o)?;
        // SAFETY: the header's contract for `ids`.
        let ids = unsafe { slice_in(ids, k, "ids")? };
        let n = s.prefetch(layer, ids)?;
        if !started.is_null() {
            // SAFETY: non-null; the caller promised room for a uint32_t.
            unsafe { put(started, n as u32, "started")? };
        }
        Ok(DS4S_OK)
    })
}
