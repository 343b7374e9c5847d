//! Calibration: runs the prepared float model over samples and streams the statistics of every
//! activation the plan will quantize into a [`StatsFile`].

use super::{model_hash, plan, prepare, QuantConfig};
use crate::calibration::{Method, NonFinitePolicy, StatsFile};
use crate::formats::data::Binding;
use crate::interp::Program;
use crate::run::{run_samples, RunError};
use crate::tensor::Tensor;
use melior::ir::Module;

#[derive(Debug, Clone)]
pub struct CalibrateOptions {
    pub method: Method,
    pub bins: usize,
    pub threads: usize,
    pub limit: Option<usize>,
    /// Calibrate samples i, i + n, i + 2n, ... (shard i of n).
    pub shard: Option<(usize, usize)>,
    pub non_finite: NonFinitePolicy,
    pub config: QuantConfig,
}

impl Default for CalibrateOptions {
    fn default() -> Self {
        CalibrateOptions {
            method: Method::MinMax,
            bins: 2048,
            threads: 0,
            limit: None,
            shard: None,
            non_finite: NonFinitePolicy::Error,
            config: QuantConfig::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    #[error(transparent)]
    Ir(#[from] crate::ir::IrError),
    #[error(transparent)]
    Interp(#[from] crate::interp::InterpError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Calib(#[from] crate::calibration::CalibError),
    #[error("shard {0}/{1} is not valid (expected 0 ≤ I < N)")]
    Shard(usize, usize),
    #[error("the model has no tensor to calibrate (no quantizable op the dialect tables know)")]
    NothingToCalibrate,
}

/// The sample indices of a run: the first `limit` samples, then every n-th from i.
pub fn sample_indices(
    total: usize,
    limit: Option<usize>,
    shard: Option<(usize, usize)>,
) -> Result<Vec<usize>, CalibrateError> {
    let n = limit.map_or(total, |l| l.min(total));
    match shard {
        None => Ok((0..n).collect()),
        Some((i, k)) if k > 0 && i < k => Ok((i..n).step_by(k).collect()),
        Some((i, k)) => Err(CalibrateError::Shard(i, k)),
    }
}

/// Prepares `module` (in place), runs it over the samples and returns the statistics.
pub fn calibrate(module: &Module, data: &Binding, opts: &CalibrateOptions) -> Result<StatsFile, CalibrateError> {
    prepare(module)?;
    let hash = model_hash(module);
    let plan = plan(module, None, &opts.config)?;
    let keys = plan.observed_keys();
    if keys.is_empty() {
        return Err(CalibrateError::NothingToCalibrate);
    }
    let program = Program::compile(module, None)?;
    let watch = program.watch(&keys)?;
    let mut stats = StatsFile::new(hash, opts.method, opts.bins, opts.non_finite);
    for p in plan.activations.iter().filter(|p| p.same_as.is_none()) {
        if let Some((name, pct)) = &p.method {
            let m = Method::from_name(name, *pct)?;
            if m != opts.method {
                stats.method_overrides.insert(p.key.clone(), m);
            }
        }
    }
    let indices = sample_indices(data.samples, opts.limit, opts.shard)?;
    let mut first_error = None;
    run_samples(
        &program,
        data,
        &indices,
        opts.threads,
        &watch,
        false,
        &mut |sample, key, value: &Tensor| {
            let Tensor::F32(a) = value else { return Ok(()) };
            if let Err(e) = stats.observe(key, sample, &a.view(), None) {
                let msg = e.to_string();
                first_error.get_or_insert(e);
                return Err(msg);
            }
            Ok(())
        },
        "calibrate",
    )
    .map_err(|e| match first_error.take() {
        Some(c) => CalibrateError::Calib(c),
        None => CalibrateError::Run(e),
    })?;
    stats.num_samples = indices.len() as u64;
    stats.finalize()?;
    Ok(stats)
}
