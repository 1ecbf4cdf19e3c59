//! Queries of an open handle: the layout, an expert's slice, a tensor by name, the counters.

use crate::error::{
    chain, Failure, DS4S_ERR_FORMAT, DS4S_ERR_NOT_FOUND, DS4S_ERR_OUT_OF_RANGE, DS4S_OK,
};
use crate::handle::with_open;
use crate::*;
use ds4_stream::device::BackendKind;
use ds4_stream::model::ExpertKind;
use std::ffi::{c_char, c_int, CStr};

/// # Safety
/// `out` is NULL or valid for reads and writes of its `struct_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn ds4s_get_layout(h: u64, out: *mut Ds4sLayout) -> c_int {
    with_open("ds4s_get_layout", h, |_, o| {
        let m = &o.model;
        let l0 = m
            .layers
            .first()
            .ok_or_else(|| Failure::new(DS4S_ERR_FORMAT, "the model has no layers"))?;
        let too_big = |what: &str, v: u64| {
            u32::try_from(v).map_err(|_| {
                Failure::new(DS4S_ERR_OUT_OF_RANGE, format!("{what} {v} exceeds 32 bits"))
            })
        };
        let (mem, slots, slot_bytes) = match &o.store {
            Some(s) => {
                let dev = s.slab().memory().device_addr().is_some();
                (i32::from(dev), s.capacity() as u32, s.slot_bytes())
            }
            None => (DS4S_MEM_HOST, 0, 0),
        };
        let v = Ds4sLayout {
            n_layer: m.shape.n_layer,
            n_expert: too_big("n_expert", m.shape.n_expert)?,
            n_expert_used: too_big("n_expert_used", m.shape.n_expert_used)?,
            n_hash_layer: m.shape.n_hash_layer,
            gate_type: l0.gate.tensor.ggml_type.id(),
            up_type: l0.up.tensor.ggml_type.id(),
            down_type: l0.down.tensor.ggml_type.id(),
            backend: match o.backend {
                BackendKind::Host => DS4S_BACKEND_HOST,
                BackendKind::Cuda => DS4S_BACKEND_CUDA,
                BackendKind::Hip => DS4S_BACKEND_HIP,
            },
            expert_memory: mem,
            expert_cache_slots: slots,
            n_embd: m.shape.n_embd,
            expert_ff: m.shape.expert_ff,
            vocab: m.shape.vocab,
            file_size: o.engine.file_len(),
            gate_bytes: l0.gate.expert_bytes,
            up_bytes: l0.up.expert_bytes,
            down_bytes: l0.down.expert_bytes,
            expert_bytes: l0.expert_bytes(),
            expert_slot_bytes: slot_bytes,
            ..Ds4sLayout::default()
        };
        // SAFETY: the header's contract for `out`.
        unsafe { write_out(out, v, "out")? };
        Ok(DS4S_OK)
    })
}

/// # Safety
/// `offset` and `len` are NULL or valid for a write of a `uint64_t` each.
#[no_mangle]
pub unsafe extern "C" fn ds4s_expert_slice(
    h: u64,
    layer: u32,
    expert: u32,
    kind: c_int,
    offset: *mut u64,
    len: *mut u64,
) -> c_int {
    with_open("ds4s_expert_slice", h, |_, o| {
        let k = match kind {
            DS4S_GATE => ExpertKind::Gate,
            DS4S_UP => ExpertKind::Up,
            DS4S_DOWN => ExpertKind::Down,
            _ => {
                return Err(Failure::invalid(format!(
                    "kind {kind} is not DS4S_GATE/UP/DOWN"
                )))
            }
        };
        if offset.is_null() || len.is_null() {
            return Err(Failure::invalid("offset or len is NULL"));
        }
        let s = o
            .model
            .expert_slice(layer.into(), k, expert.into())
            .map_err(|e| Failure::new(DS4S_ERR_OUT_OF_RANGE, chain(&e)))?;
        // SAFETY: checked non-null; the caller promised room for a uint64_t each.
        unsafe {
            put(offset, s.offset, "offset")?;
            put(len, s.len, "len")?;
        }
        Ok(DS4S_OK)
    })
}

/// # Safety
/// `name` is NULL or NUL-terminated; `out` is NULL or valid for its `struct_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn ds4s_tensor_info(
    h: u64,
    name: *const c_char,
    out: *mut Ds4sTensor,
) -> c_int {
    with_open("ds4s_tensor_info", h, |_, o| {
        if name.is_null() {
            return Err(Failure::invalid("name is NULL"));
        }
        // SAFETY: non-null, NUL-terminated by the header's contract.
        let n = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        let t = o.gguf.tensors.iter().find(|t| t.name == n).ok_or_else(|| {
            Failure::new(
                DS4S_ERR_NOT_FOUND,
                format!("no tensor named {n:?} in the file"),
            )
        })?;
        if t.dims.len() > 4 {
            return Err(Failure::new(
                DS4S_ERR_OUT_OF_RANGE,
                format!("tensor {n:?} has {} dims (at most 4 fit)", t.dims.len()),
            ));
        }
        let mut dims = [1u64; 4];
        dims[..t.dims.len()].copy_from_slice(&t.dims);
        let v = Ds4sTensor {
            ggml_type: t.ggml_type.id(),
            n_dims: t.dims.len() as u32,
            dims,
            offset: t.offset,
            nbytes: t.nbytes,
            ..Ds4sTensor::default()
        };
        // SAFETY: the header's contract for `out`.
        unsafe { write_out(out, v, "out")? };
        Ok(DS4S_OK)
    })
}

/// # Safety
/// `out` is NULL or valid for reads and writes of its `struct_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn ds4s_get_stats(h: u64, out: *mut Ds4sStats) -> c_int {
    with_open("ds4s_get_stats", h, |_, o| {
        let e = o.engine.stats();
        let mut v = Ds4sStats {
            bytes_read: e.bytes,
            requests: e.requests,
            failed_requests: e.failed_requests,
            ..Ds4sStats::default()
        };
        if let Some(s) = &o.store {
            let st = s.stats();
            v.expert_hits = st.cache.hits;
            v.expert_dedup_hits = st.cache.dedup_hits;
            v.expert_misses = st.cache.misses;
            v.expert_evictions = st.cache.evictions;
            v.expert_fills_failed = st.cache.fills_failed;
            v.expert_bytes_streamed = st.bytes_streamed;
            v.expert_loads_in_flight = st.loads_in_flight;
            v.expert_pinned_slots = st.pinned_slots;
        }
        // SAFETY: the header's contract for `out`.
        unsafe { write_out(out, v, "out")? };
        Ok(DS4S_OK)
    })
}
