//! What a target's search ranks, and the recipes it scores: activation points ranked by the
//! noise of their own int8 rounding (step 1), the compute ops whose weights can be left float
//! (step 4), and the overrides that raise a set of either.

use super::{Goal, TargetError};
use crate::calibration::StatsFile;
use crate::evaluate::EvalOptions;
use crate::formats::data::{bind, Dataset};
use crate::interp::Program;
use crate::params::{fake_quant, Rounding};
use crate::quantize::{plan, prepare_as_calibrated, Override, QuantConfig};
use crate::run::run_samples;
use crate::tensor::Tensor;
use melior::ir::Module;
use std::collections::BTreeMap;

/// Ranks the observed activation points of `config`'s plan by the SQNR of their own int8
/// fake-quantization on the scoring samples, worst first; returns (key, followers, SQNR).
pub(super) fn rank_points(
    float: &Module,
    stats: &StatsFile,
    config: &QuantConfig,
    data: &Dataset,
    opts: &EvalOptions,
) -> Result<Vec<(String, Vec<String>, f64)>, TargetError> {
    let config = prepare_as_calibrated(float, stats, config)?;
    let p = plan(float, Some(stats), &config)?;
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
    let indices = opts.picked(binding.samples);
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

/// The compute ops whose weights `config` quantizes to int8 (or int4), by output key: what an
/// `exclude` override matches to leave the whole op float.
pub(super) fn weight_ops(float: &Module, stats: &StatsFile, config: &QuantConfig) -> Result<Vec<String>, TargetError> {
    use crate::passes::quantize_weights::weight_site;
    use crate::recipe::WeightMode;
    let config = prepare_as_calibrated(float, stats, config)?;
    let func = crate::ir::graph::find_function(float, None)?;
    let mut keys: Vec<String> = Vec::new();
    for op in crate::ir::graph::body_ops(func) {
        let Some(site) = weight_site(op, &config) else { continue };
        if matches!(site.res.weights, WeightMode::Int8 | WeightMode::Int4)
            && !site.out_key.is_empty()
            && !keys.contains(&site.out_key)
        {
            keys.push(site.out_key);
        }
    }
    Ok(keys)
}

/// `config` with only op `keep` of `ops` quantized (every other one excluded).
pub(super) fn only_op(config: &QuantConfig, ops: &[String], keep: usize) -> QuantConfig {
    let mut c = config.clone();
    for (i, key) in ops.iter().enumerate() {
        if i != keep {
            c.overrides.push(Override {
                pattern: key.clone(),
                exclude: true,
                op_only: true,
                ..Default::default()
            });
        }
    }
    c
}

/// `config` with the ranked ops at `floated` (indices into `ops`) left float by `goal`'s
/// search.
pub(super) fn floated_ops(config: QuantConfig, ops: &[RankedOp], floated: &[usize], goal: &Goal) -> QuantConfig {
    let mut c = config;
    for &i in floated {
        c.overrides.push(Override {
            pattern: ops[i].key.clone(),
            exclude: true,
            by: Some(format!(
                "{} (its int8 weights cost the target most per MAC)",
                goal.flag()
            )),
            op_only: true,
            ..Default::default()
        });
    }
    c
}

/// A compute op ranked by step 4: its output key, the worst output's SQNR with it alone
/// quantized, and its MACs.
#[derive(Debug, Clone)]
pub(super) struct RankedOp {
    pub(super) key: String,
    pub(super) db: f64,
    pub(super) macs: u64,
}

/// An activation point the search raised: its index in the ranking, and whether to float
/// (else to int16).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Raise {
    pub(super) index: usize,
    pub(super) float: bool,
}

/// The first `n_float` ranked points in float and the next up to `n_int16` in int16.
pub(super) fn prefix(n_int16: usize, n_float: usize) -> Vec<Raise> {
    (0..n_int16.max(n_float))
        .map(|index| Raise {
            index,
            float: index < n_float,
        })
        .collect()
}

/// `config` with the ranked points `raised` in float or int16. A point's key is also the key
/// of the op that writes it, whose inputs are raised with it: on fer that reaches a target
/// with fewer points raised and more of the MACs int8 (77 % against 58 %) than raising the
/// points alone.
pub(super) fn raised_config(
    config: &QuantConfig,
    ranked: &[(String, Vec<String>, f64)],
    raised: &[Raise],
    goal: &Goal,
) -> QuantConfig {
    let mut c = config.clone();
    for r in raised {
        let (key, followers, _) = &ranked[r.index];
        let by = format!(
            "{} (raised to {}: this activation's int8 rounding costs the target most)",
            goal.flag(),
            if r.float { "float" } else { "int16" }
        );
        for k in std::iter::once(key).chain(followers) {
            c.overrides.push(Override {
                pattern: k.clone(),
                exclude: r.float,
                activations: (!r.float).then(|| "int16".into()),
                by: Some(by.clone()),
                ..Default::default()
            });
        }
    }
    c
}
