//! The main run on a GPU: opening the CUDA or HIP device `--backend` asks for, and building
//! [`GpuMoe`](ds4_stream::decode::GpuMoe) on it with the run's options. One generic build for both
//! backends; the run loop sees a `dyn GpuRunner`.

use super::Args;
use crate::cli::{chain, CliError};
use ds4_stream::decode::{DecodeError, FetchStats, TokenTrace};
use ds4_stream::device::{BackendArg, BackendKind, Device};
use std::io::Write;
use std::sync::Arc;

/// The GPU of a run, when it has one (no variants in a build without GPU backends).
pub(super) enum GpuHandle {
    #[cfg(feature = "cuda")]
    Cuda(Arc<ds4_stream::device::cuda::CudaDevice>),
    #[cfg(feature = "hip")]
    Hip(Arc<ds4_stream::device::hip::HipDevice>),
}

/// What the run loop needs of the stack on a GPU, whatever the backend.
pub(super) trait GpuRunner {
    fn token(
        &mut self,
        t: u32,
        forced: Option<&[TokenTrace]>,
    ) -> Result<(Vec<f32>, Vec<TokenTrace>), DecodeError>;
    fn stats(&self) -> FetchStats;
    /// The allocation steps, measured, as JSON.
    fn alloc_steps(&self) -> serde_json::Value;
}

#[cfg(any(feature = "cuda", feature = "hip"))]
impl<D: ds4_stream::device::GpuDevice> GpuRunner for ds4_stream::decode::GpuMoe<'_, D> {
    fn token(
        &mut self,
        t: u32,
        forced: Option<&[TokenTrace]>,
    ) -> Result<(Vec<f32>, Vec<TokenTrace>), DecodeError> {
        ds4_stream::decode::GpuMoe::token(self, t, forced)
    }
    fn stats(&self) -> FetchStats {
        ds4_stream::decode::GpuMoe::stats(self)
    }
    fn alloc_steps(&self) -> serde_json::Value {
        serde_json::to_value(ds4_stream::decode::GpuMoe::alloc_steps(self)).unwrap_or_default()
    }
}

/// Opens the device the run reads into: `--backend host|cuda|hip`, or `auto` = the first of
/// cuda, hip, host that opens (the default). Under `auto`, a backend not compiled in or with no
/// device (no driver, no GPU) is passed over silently, so a run without a GPU says nothing
/// more than `--backend host` would; a GPU that is present but fails to open is a note.
pub(super) fn open_device(b: BackendArg) -> Result<(Arc<dyn Device>, Option<GpuHandle>), CliError> {
    let wanted: &[BackendKind] = match b {
        BackendArg::Kind(BackendKind::Host) => &[],
        BackendArg::Kind(BackendKind::Cuda) => &[BackendKind::Cuda],
        BackendArg::Kind(BackendKind::Hip) => &[BackendKind::Hip],
        BackendArg::Auto => &[BackendKind::Cuda, BackendKind::Hip],
    };
    for &kind in wanted {
        match open_gpu(kind) {
            Ok(h) => return Ok(h),
            Err(e) if b == BackendArg::Auto => {
                if !matches!(
                    e,
                    ds4_stream::device::DeviceError::NotCompiled(_)
                        | ds4_stream::device::DeviceError::NoDevice { .. }
                ) {
                    let _ = writeln!(std::io::stderr(), "note: {e}; trying the next backend");
                }
            }
            Err(e) => return Err(CliError::runtime(chain(&e))),
        }
    }
    let host = BackendKind::Host
        .open_default()
        .map_err(|e| CliError::runtime(chain(&e)))?;
    Ok((host, None))
}

fn open_gpu(
    kind: BackendKind,
) -> Result<(Arc<dyn Device>, Option<GpuHandle>), ds4_stream::device::DeviceError> {
    match kind {
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => {
            use ds4_stream::device::cuda::{CudaConfig, CudaDevice};
            let d = Arc::new(CudaDevice::new(CudaConfig::default())?);
            Ok((d.clone(), Some(GpuHandle::Cuda(d))))
        }
        #[cfg(feature = "hip")]
        BackendKind::Hip => {
            use ds4_stream::device::hip::{HipConfig, HipDevice};
            let d = Arc::new(HipDevice::new(HipConfig::default())?);
            Ok((d.clone(), Some(GpuHandle::Hip(d))))
        }
        other => Err(ds4_stream::device::DeviceError::NotCompiled(other)),
    }
}

/// What the GPU build takes from the run besides the device.
#[cfg_attr(not(any(feature = "cuda", feature = "hip")), allow(dead_code))]
pub(super) struct Build<'a, 'r> {
    pub a: &'r Args,
    pub path: &'r std::path::Path,
    pub engine: &'a ds4_stream::engine::Engine,
    pub model: &'a ds4_stream::model::Ds4Model,
    pub weights: &'a ds4_stream::decode::MoeWeights,
    pub slots: usize,
    pub policy: ds4_stream::expert_cache::PolicyKind,
    /// RAM tier experts (`--ram-streaming-cache-experts`).
    pub ram: Option<usize>,
    pub preload: &'r [ds4_stream::expert_cache::ExpertKey],
}

/// Builds the stack on `gpu` with the run's options; returns it and how many experts were
/// preloaded.
#[cfg_attr(
    not(any(feature = "cuda", feature = "hip")),
    allow(unused_variables, clippy::needless_pass_by_value)
)]
pub(super) fn build<'a>(
    gpu: GpuHandle,
    b: &Build<'a, '_>,
) -> Result<(Box<dyn GpuRunner + 'a>, usize), DecodeError> {
    match gpu {
        #[cfg(feature = "cuda")]
        GpuHandle::Cuda(d) => build_on(d, b),
        #[cfg(feature = "hip")]
        GpuHandle::Hip(d) => build_on(d, b),
    }
}

#[cfg(any(feature = "cuda", feature = "hip"))]
fn build_on<'a, D: ds4_stream::device::GpuDevice>(
    dev: Arc<D>,
    b: &Build<'a, '_>,
) -> Result<(Box<dyn GpuRunner + 'a>, usize), DecodeError> {
    let a = b.a;
    let mut c = ds4_stream::decode::GpuMoe::new(
        dev,
        b.engine,
        b.model,
        b.weights,
        a.ssd_streaming.then_some(b.slots),
        b.policy,
    )?
    .with_lookahead(a.ssd_streaming_lookahead);
    if a.ssd_streaming_c_engine_pattern {
        c = c.with_c_engine_pattern(b.path)?;
    }
    if let Some(n) = b.ram {
        c = c.with_ram_tier(n, b.policy)?;
    }
    let mut preloaded = 0;
    if a.ssd_streaming {
        c = c.with_full_layers(a.ssd_streaming_full_layers)?;
        preloaded = c.preload(b.preload)?;
    }
    Ok((Box::new(c), preloaded))
}
