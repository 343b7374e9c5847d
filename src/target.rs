//! `quantize --target-sqnr DB`: reaches an output quality by raising the fewest activations
//! from int8 to int16, then to float.
//!
//! 1. Each activation point's own damage: the float model runs on the first samples, and the
//!    SQNR of every point's values against their int8 fake-quantized copy (the noise that
//!    point alone adds) ranks the points, worst first.
//! 2. The model is quantized with the `n` worst points raised, and scored — the mean SQNR of
//!    its outputs against the float model on the same samples, as `--choose-method` scores.
//!    `n` doubles until the target holds, then a bisection finds the smallest such `n`; each
//!    step is one quantization and one evaluation.
//! 3. With every point at int16 (where the output format can hold int16) and the target still
//!    missed, the same search moves points to float, worst first. A target that every
//!    activation in float cannot reach is an error: nothing is written.
//!
//! Same-scale followers (a MaxPool's output reusing its input's scale) move with their source.

use crate::calibration::StatsFile;
use crate::evaluate::{evaluate, EvalError, EvalOptions};
use crate::formats::data::{bind, Dataset};
use crate::interp::Program;
use crate::params::{fake_quant, Rounding};
use crate::quantize::{plan, prepare, quantize_module, Override, QuantConfig, QuantizeError};
use crate::run::{run_samples, RunError};
use crate::tensor::Tensor;
use melior::ir::Module;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error(transparent)]
    Quantize(#[from] QuantizeError),
    #[error(transparent)]
    Evaluate(#[from] EvalError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Interp(#[from] crate::interp::InterpError),
    #[error(transparent)]
    Ir(#[from] crate::ir::IrError),
    #[error(transparent)]
    Pass(#[from] crate::passes::PassError),
    #[error(transparent)]
    Data(#[from] crate::formats::data::DataError),
    #[error("{0}")]
    Load(String),
    #[error("target {target} dB is out of reach by raising activations: all int8 gives {int8:.2} dB and every activation in float {best:.2} dB on {samples} calibration samples (the weights' int8 error remains); nothing written — lower the target, or leave ops float with --exclude")]
    Unreachable {
        target: f64,
        int8: f64,
        best: f64,
        samples: usize,
    },
}

/// An activation the search raised above int8.
#[derive(Debug, Clone, Serialize)]
pub struct RaisedPoint {
    pub key: String,
    /// `int16` or `float`.
    pub to: String,
    /// The SQNR of this point's values quantized to int8 alone (why it was chosen).
    pub int8_sqnr_db: f64,
}

/// What the search found.
#[derive(Debug, Clone, Serialize)]
pub struct TargetReport {
    pub target_db: f64,
    /// The mean output SQNR on the scoring samples: all int8, then with the raised points.
    pub int8_sqnr_db: f64,
    pub sqnr_db: f64,
    pub samples: usize,
    pub points: usize,
    pub raised: Vec<RaisedPoint>,
    /// Quantize + evaluate rounds the search made.
    pub evaluations: usize,
    pub seconds: f64,
}

/// The recipe with the search's raises as overrides (what `--json` and the summary report).
pub struct Reached {
    pub config: QuantConfig,
    pub report: TargetReport,
}

/// The samples a target is scored on (the first of the calibration data).
pub const TARGET_SAMPLES: usize = 16;

/// Ranks the observed activation points of `config`'s plan by the SQNR of their own int8
/// fake-quantization on the first samples, worst first; returns (key, followers, SQNR).
fn rank_points(
    float: &Module,
    stats: &StatsFile,
    config: &QuantConfig,
    data: &Dataset,
    opts: &EvalOptions,
) -> Result<Vec<(String, Vec<String>, f64)>, TargetError> {
    if let Some(shapes) = &stats.input_shapes {
        crate::quantize::resolve_types(float, shapes);
    }
    prepare(float)?;
    let p = plan(float, Some(stats), config)?;
    let mut sources: BTreeMap<String, (crate::params::QuantParams, Vec<String>)> = BTreeMap::new();
    for a in &p.activations {
        match (&a.same_as, &a.params) {
            (None, Some(q)) => {
                sources.entry(a.key.clone()).or_insert((q.clone(), Vec::new()));
            }
            _ => {}
        }
    }
    for a in &p.activations {
        if let Some(src) = &a.same_as {
            if let Some((_, f)) = sources.get_mut(src) {
                f.push(a.key.clone());
            }
        }
    }
    drop(p);
    let program = Program::compile(float, None)?;
    let keys: Vec<String> = sources.keys().cloned().collect();
    let watch = program.watch(&keys)?;
    let binding = bind(data, &program.inputs, &opts.overrides)?;
    let n = opts.limit.map_or(binding.samples, |l| l.min(binding.samples));
    let indices: Vec<usize> = (0..n).collect();
    let mut energy: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    run_samples(
        &program,
        &binding,
        &indices,
        opts.threads,
        &watch,
        false,
        &mut |_, k, v| {
            let (Tensor::F32(x), Some((q, _))) = (v, sources.get(k)) else {
                return Ok(());
            };
            let fq = fake_quant(&x.view(), q, Rounding::HalfEven).map_err(|e| e.to_string())?;
            let e = energy.entry(k.to_string()).or_default();
            for (a, b) in x.iter().zip(fq.iter()) {
                e.0 += (*a as f64) * (*a as f64);
                e.1 += ((a - b) as f64) * ((a - b) as f64);
            }
            Ok(())
        },
        "rank activations",
    )?;
    let mut ranked: Vec<(String, Vec<String>, f64)> = sources
        .into_iter()
        .map(|(k, (_, followers))| {
            let db = match energy.get(&k) {
                Some(&(s, n)) if n > 0.0 => 10.0 * (s / n).log10(),
                Some(_) => f64::INFINITY,
                None => f64::INFINITY,
            };
            (k, followers, db)
        })
        .collect();
    // worst first; ties in key order (deterministic)
    ranked.sort_by(|a, b| a.2.total_cmp(&b.2).then_with(|| a.0.cmp(&b.0)));
    Ok(ranked)
}

/// `config` with the first `n_float` ranked points in float and the next up to `n_int16` in
/// int16.
fn raised_config(
    config: &QuantConfig,
    ranked: &[(String, Vec<String>, f64)],
    n_int16: usize,
    n_float: usize,
) -> QuantConfig {
    let mut c = config.clone();
    for (i, (key, followers, _)) in ranked.iter().enumerate().take(n_int16.max(n_float)) {
        for k in std::iter::once(key).chain(followers) {
            c.overrides.push(if i < n_float {
                Override {
                    pattern: k.clone(),
                    exclude: true,
                    ..Default::default()
                }
            } else {
                Override {
                    pattern: k.clone(),
                    activations: Some("int16".into()),
                    ..Default::default()
                }
            });
        }
    }
    c
}

/// Searches the fewest raised activations that bring the mean output SQNR on the first
/// [`TARGET_SAMPLES`] samples of `data` to `target_db`. `load` gives a fresh copy of the float
/// model (lowered as the output needs); `writable` says whether the output format can hold a
/// quantized module (an ONNX model of an old opset cannot hold int16 Q/DQ), and why not.
#[allow(clippy::too_many_arguments)]
pub fn reach_target<'c>(
    load: &dyn Fn() -> Result<Module<'c>, TargetError>,
    writable: &dyn Fn(&Module) -> Result<(), String>,
    stats: &StatsFile,
    config: &QuantConfig,
    data: &Dataset,
    target_db: f64,
    threads: usize,
    overrides: &[(String, String)],
    say: &mut dyn FnMut(String),
) -> Result<Reached, TargetError> {
    let t0 = std::time::Instant::now();
    let opts = EvalOptions {
        threads,
        limit: Some(TARGET_SAMPLES),
        overrides: overrides.to_vec(),
        ..Default::default()
    };
    let float = load()?;
    let evaluations = std::cell::Cell::new(0);
    let score = |c: &QuantConfig| -> Result<f64, TargetError> {
        let m = load()?;
        quantize_module(&m, stats, c)?;
        let r = evaluate(&float, &m, data, &opts)?;
        evaluations.set(evaluations.get() + 1);
        let db: Vec<f64> = r
            .outputs
            .iter()
            .map(|o| o.sqnr_db.unwrap_or(100.0).min(100.0))
            .collect();
        Ok(db.iter().sum::<f64>() / db.len().max(1) as f64)
    };
    let base = score(config)?;
    let ranked = rank_points(&load()?, stats, config, data, &opts)?;
    let n = ranked.len();
    let samples = TARGET_SAMPLES;
    let done = |c: QuantConfig, i16: usize, fl: usize, db: f64| {
        let raised = ranked
            .iter()
            .take(i16.max(fl))
            .enumerate()
            .map(|(i, (k, _, s))| RaisedPoint {
                key: k.clone(),
                to: if i < fl { "float" } else { "int16" }.into(),
                int8_sqnr_db: *s,
            })
            .collect();
        Reached {
            config: c,
            report: TargetReport {
                target_db,
                int8_sqnr_db: base,
                sqnr_db: db,
                samples,
                points: n,
                raised,
                evaluations: evaluations.get(),
                seconds: t0.elapsed().as_secs_f64(),
            },
        }
    };
    if base >= target_db {
        return Ok(done(config.clone(), 0, 0, base));
    }
    say(format!(
        "target {target_db} dB: all int8 gives {base:.2} dB on {samples} calibration samples; searching {n} activations"
    ));
    // smallest k in 1..=n with ok(k), by doubling then bisection; None when ok(n) fails
    let search = |make: &dyn Fn(usize) -> QuantConfig| -> Result<Option<(usize, f64)>, TargetError> {
        let (mut lo, mut hi, mut k) = (0usize, None, 1usize);
        let mut best = None;
        while hi.is_none() {
            let k_try = k.min(n);
            let db = score(&make(k_try))?;
            if db >= target_db {
                hi = Some(k_try);
                best = Some((k_try, db));
            } else if k_try == n {
                return Ok(None);
            } else {
                lo = k_try;
                k *= 2;
            }
        }
        let mut hi = hi.unwrap_or(n);
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            let db = score(&make(mid))?;
            if db >= target_db {
                hi = mid;
                best = Some((mid, db));
            } else {
                lo = mid;
            }
        }
        Ok(best)
    };
    // int16 only where the output can hold it
    let int16 = {
        let m = load()?;
        quantize_module(&m, stats, &raised_config(config, &ranked, n, 0))?;
        writable(&m)
    };
    let n16 = match int16 {
        Ok(()) => n,
        Err(why) => {
            say(format!(
                "target: int16 activations cannot be written ({why}); raising to float only"
            ));
            0
        }
    };
    if n > 0 {
        if n16 > 0 {
            if let Some((k, db)) = search(&|k| raised_config(config, &ranked, k, 0))? {
                let c = raised_config(config, &ranked, k, 0);
                return Ok(done(c, k, 0, db));
            }
        }
        if let Some((k, db)) = search(&|k| raised_config(config, &ranked, n16, k))? {
            let c = raised_config(config, &ranked, n16, k);
            return Ok(done(c, n16.max(k), k, db));
        }
    }
    // out of reach: a model below the target is not what was asked for
    let best = if n == 0 {
        base
    } else {
        score(&raised_config(config, &ranked, n16, n))?
    };
    Err(TargetError::Unreachable {
        target: target_db,
        int8: base,
        best,
        samples,
    })
}
