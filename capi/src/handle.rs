//! Open and close, the handle registry, and the wrappers every call on a handle runs in.

use crate::error::{call, Failure, DS4S_ERR_SHUTDOWN, DS4S_OK};
use crate::read::Pending;
use crate::registry::{Kind, Registry};
use crate::*;
use ds4_stream::device::{BackendArg, BackendKind, OpenOptions};
use ds4_stream::engine::{Engine, EngineConfig};
use ds4_stream::expert_cache::PolicyKind;
use ds4_stream::expert_store::{ExpertPins, ExpertStore};
use ds4_stream::gguf::GgufFile;
use ds4_stream::model::Ds4Model;
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
    pub error: Mutex<String>,
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
        host_unified: None,
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
