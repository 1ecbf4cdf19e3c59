//! Open, close, the layout queries and the library-level calls (version, status names, messages).

use crate::error::{call, chain, Failure, DS4S_ERR_NOT_FOUND, DS4S_ERR_OUT_OF_RANGE};
use crate::error::{DS4S_ERR_SHUTDOWN, DS4S_OK, STATUS_NAMES};
use crate::read::Pending;
use crate::registry::{Kind, Registry};
use crate::*;
use ds4_stream::device::{BackendArg, BackendKind, OpenOptions};
use ds4_stream::engine::{Engine, EngineConfig};
use ds4_stream::expert_cache::PolicyKind;
use ds4_stream::expert_store::{ExpertPins, ExpertStore};
use ds4_stream::gguf::GgufFile;
use ds4_stream::model::{Ds4Model, ExpertKind};
use std::ffi::{c_char, c_int, CStr};
use std::sync::{Arc, LazyLock, Mutex, PoisonError, RwLock, RwLockReadGuard};

/// What an open handle owns. Field order is drop order: the store (its completer waits for its
/// reads) before the engine (whose drop completes every other read and joins its threads).
pub(crate) struct Open {
    pub store: Option<ExpertStore>,
    pub engine: Arc<Engine>,
    pub model: Arc<Ds4Model>,
    pub gguf: GgufFile,
    pub backend: BackendKind,
}

pub(crate) struct Handle {
    pub open: RwLock<Option<Open>>,
    error: Mutex<String>,
    pub completions: Registry<Arc<Pending>>,
    pub leases: Registry<ExpertPins>,
}

impl Handle {
    pub fn set_error(&self, msg: &str) {
        *self.error.lock().unwrap_or_else(PoisonError::into_inner) = msg.to_string();
    }

    /// The open state, shared; `DS4S_ERR_SHUTDOWN` if a close got there first.
    pub fn open(&self) -> Result<RwLockReadGuard<'_, Option<Open>>, Failure> {
        let g = self.open.read().unwrap_or_else(PoisonError::into_inner);
        if g.is_none() {
            return Err(Failure::new(
                DS4S_ERR_SHUTDOWN,
                "the handle is being closed",
            ));
        }
        Ok(g)
    }
}

pub(crate) static HANDLES: LazyLock<Registry<Arc<Handle>>> =
    LazyLock::new(|| Registry::new(Kind::Model));

/// Runs `body` with handle `h`: a failure's message also goes to the handle.
pub(crate) fn with_handle(
    func: &str,
    h: u64,
    body: impl FnOnce(&Arc<Handle>) -> Result<c_int, Failure>,
) -> c_int {
    let handle = HANDLES.get(h);
    let on_err = |m: &str| {
        if let Ok(hd) = &handle {
            hd.set_error(m);
        }
    };
    call(func, on_err, || {
        body(handle.as_ref().map_err(Clone::clone)?)
    })
}

/// Runs `body` on `h`'s open state.
pub(crate) fn with_open(
    func: &str,
    h: u64,
    body: impl FnOnce(&Arc<Handle>, &Open) -> Result<c_int, Failure>,
) -> c_int {
    with_handle(func, h, |hd| {
        let g = hd.open()?;
        match g.as_ref() {
            Some(o) => body(hd, o),
            None => Err(Failure::new(
                DS4S_ERR_SHUTDOWN,
                "the handle is being closed",
            )),
        }
    })
}

#[no_mangle]
pub extern "C" fn ds4s_abi_version() -> u32 {
    ABI_VERSION
}

/// # Safety
/// `opts` is NULL or valid for a write of a `ds4s_options`.
#[no_mangle]
pub unsafe extern "C" fn ds4s_options_init(opts: *mut Ds4sOptions) {
    let _ = call(
        "ds4s_options_init",
        |_| {},
        || {
            let v = Ds4sOptions {
                struct_size: std::mem::size_of::<Ds4sOptions>() as u32,
                ..Ds4sOptions::default()
            };
            // SAFETY: the header's contract for `opts`.
            unsafe { put(opts, v, "opts")? };
            Ok(DS4S_OK)
        },
    );
}

#[no_mangle]
pub extern "C" fn ds4s_status_name(status: c_int) -> *const c_char {
    const NAMES: [&CStr; 16] = [
        c"DS4S_OK",
        c"DS4S_PENDING",
        c"DS4S_TIMEOUT",
        c"DS4S_ERR_INVALID_ARGUMENT",
        c"DS4S_ERR_BAD_HANDLE",
        c"DS4S_ERR_IO",
        c"DS4S_ERR_FORMAT",
        c"DS4S_ERR_OUT_OF_RANGE",
        c"DS4S_ERR_UNSUPPORTED",
        c"DS4S_ERR_DEVICE",
        c"DS4S_ERR_CACHE_FULL",
        c"DS4S_ERR_BUSY",
        c"DS4S_ERR_NO_MEMORY",
        c"DS4S_ERR_SHUTDOWN",
        c"DS4S_ERR_NOT_FOUND",
        c"DS4S_ERR_INTERNAL",
    ];
    match STATUS_NAMES.iter().position(|&(s, _)| s == status) {
        Some(i) => NAMES[i].as_ptr(),
        None => c"unknown status".as_ptr(),
    }
}

#[no_mangle]
pub extern "C" fn ds4s_last_error() -> *const c_char {
    crate::error::last_ptr()
}

/// # Safety
/// `buf` is NULL with `cap == 0`, or valid for writes of `cap` bytes.
#[no_mangle]
pub unsafe extern "C" fn ds4s_error_message(h: u64, buf: *mut c_char, cap: usize) -> usize {
    let mut len = 0;
    let _ = call(
        "ds4s_error_message",
        |_| {},
        || {
            let Ok(hd) = HANDLES.get(h) else {
                return Ok(DS4S_OK);
            };
            let msg = hd
                .error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            len = msg.len();
            if cap > 0 && !buf.is_null() {
                let n = len.min(cap - 1);
                // SAFETY: the caller promised `cap` writable bytes at `buf`; we write n + 1 <= cap.
                unsafe {
                    std::ptr::copy_nonoverlapping(msg.as_ptr(), buf.cast::<u8>(), n);
                    *buf.add(n) = 0;
                }
            }
            Ok(DS4S_OK)
        },
    );
    len
}

fn engine_config(
    o: &Ds4sOptions,
) -> Result<(EngineConfig, BackendArg, OpenOptions, usize), Failure> {
    let d = EngineConfig::default();
    if o.flags & !(DS4S_OPEN_NO_DIRECT_IO | DS4S_OPEN_COLD) != 0 {
        return Err(Failure::invalid(format!(
            "opts->flags {:#x} has unknown bits",
            o.flags
        )));
    }
    if o.reserved != 0 {
        return Err(Failure::invalid("opts->reserved must be 0"));
    }
    let or = |v: u64, def: usize| if v == 0 { Ok(def) } else { usize::try_from(v) };
    let bad = |what: &str, v: u64| Failure::invalid(format!("opts->{what} {v} is too large"));
    let cfg = EngineConfig {
        workers: or(o.workers.into(), d.workers).map_err(|_| bad("workers", o.workers.into()))?,
        slots: or(o.staging_slots.into(), d.slots)
            .map_err(|_| bad("staging_slots", o.staging_slots.into()))?,
        slot_bytes: or(o.staging_slot_bytes, d.slot_bytes)
            .map_err(|_| bad("staging_slot_bytes", o.staging_slot_bytes))?,
        direct: o.flags & DS4S_OPEN_NO_DIRECT_IO == 0,
        cold: o.flags & DS4S_OPEN_COLD != 0,
        ..d
    };
    let backend = match o.backend {
        DS4S_BACKEND_AUTO => BackendArg::Auto,
        DS4S_BACKEND_HOST => BackendArg::Kind(BackendKind::Host),
        DS4S_BACKEND_CUDA => BackendArg::Kind(BackendKind::Cuda),
        DS4S_BACKEND_HIP => BackendArg::Kind(BackendKind::Hip),
        b => {
            return Err(Failure::invalid(format!(
                "opts->backend {b} is not a DS4S_BACKEND_*"
            )))
        }
    };
    let ordinal = usize::try_from(o.device_ordinal).map_err(|_| {
        Failure::invalid(format!(
            "opts->device_ordinal {} is negative",
            o.device_ordinal
        ))
    })?;
    let dev = OpenOptions {
        ordinal,
        unified: None,
    };
    Ok((cfg, backend, dev, o.expert_cache_slots as usize))
}

fn open(path: &str, o: &Ds4sOptions) -> Result<Open, Failure> {
    let (cfg, backend, dev, slots) = engine_config(o)?;
    let (gguf, model) = Ds4Model::open(path)?;
    let device = backend.open(dev)?;
    let kind = device.kind();
    let engine = Arc::new(Engine::open(path, device, cfg)?);
    let model = Arc::new(model);
    let store = match slots {
        0 => None,
        n => Some(ExpertStore::new(
            Arc::clone(&engine),
            Arc::clone(&model),
            n,
            PolicyKind::DEFAULT,
        )?),
    };
    Ok(Open {
        store,
        engine,
        model,
        gguf,
        backend: kind,
    })
}

/// # Safety
/// `path` is NULL or a NUL-terminated string; `opts` is NULL or a valid `ds4s_options`; `out` is
/// NULL or valid for a write of a `ds4s_handle`.
#[no_mangle]
pub unsafe extern "C" fn ds4s_open(
    path: *const c_char,
    opts: *const Ds4sOptions,
    out: *mut u64,
) -> c_int {
    call(
        "ds4s_open",
        |_| {},
        || {
            if out.is_null() {
                return Err(Failure::invalid("out is NULL"));
            }
            if path.is_null() {
                return Err(Failure::invalid("path is NULL"));
            }
            // SAFETY: non-null, and the header asks for a NUL-terminated string.
            let p = unsafe { CStr::from_ptr(path) };
            let p = p
                .to_str()
                .map_err(|_| Failure::invalid("path is not UTF-8"))?;
            let o = if opts.is_null() {
                Ds4sOptions::default()
            } else {
                // SAFETY: the header's contract for `opts`.
                unsafe { read_in(opts, "opts")? }
            };
            let state = open(p, &o)?;
            let h = Arc::new(Handle {
                open: RwLock::new(Some(state)),
                error: Mutex::new(String::new()),
                completions: Registry::new(Kind::Completion),
                leases: Registry::new(Kind::Lease),
            });
            let id = HANDLES.insert(h);
            // SAFETY: checked non-null above; the caller promised room for a handle.
            unsafe { put(out, id, "out")? };
            Ok(DS4S_OK)
        },
    )
}

#[no_mangle]
pub extern "C" fn ds4s_close(h: u64) -> c_int {
    call(
        "ds4s_close",
        |_| {},
        || {
            let hd = HANDLES.remove(h)?;
            // Waits for calls inside (they hold the read lock); later ones find the registry entry
            // gone, or None here.
            let open = hd
                .open
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            drop(hd.leases.drain());
            drop(open); // store, then engine: every read finished or failed with Shutdown
            for c in hd.completions.drain() {
                c.settle();
            }
            Ok(DS4S_OK)
        },
    )
}

/// # Safety
/// `out` is NULL or valid for reads and writes of its `struct_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn ds4s_get_layout(h: u64, out: *mut Ds4sLayout) -> c_int {
    with_open("ds4s_get_layout", h, |_, o| {
        let m = &o.model;
        let l0 = m.layers.first().ok_or_else(|| {
            Failure::new(crate::error::DS4S_ERR_FORMAT, "the model has no layers")
        })?;
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
