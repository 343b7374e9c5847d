//! What a target's search ranks, and the recipes it scores: activation points ranked by the
//! noise of their own int8 rounding (step 1), the compute ops whose weights can be left float
//! (step 4), and the overrides that raise a set of either.

use super::{noise, Goal, TargetError};
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
/// quantized, with it alone left float (every other op int8), and its MACs.
#[derive(Debug, Clone)]
pub(super) struct RankedOp {
    pub(super) key: String,
    pub(super) db: f64,
    /// Measured only where the in-context order is (`op_orders`).
    pub(super) without_db: Option<f64>,
    pub(super) macs: u64,
}

/// Step 4's two orders of `ops`, most worth leaving float per MAC first (ties in key order):
///
/// - **alone**: by the noise of the model with the op alone quantized. It sees what an op
///   costs when most others end float — a target far above all int8 (MobileNet: 13 → 30 dB);
/// - **in context**: by the noise the all-int8 model (`int8_db`) sheds when the op alone is
///   left float. It sees what an op costs among int8 neighbours — a target near all int8 (fer
///   under `--gptq-asymmetric`: 29.1 → 30 dB), where an op's error alone misjudges what
///   floating it saves (its successors' rounding stays).
///
/// ```text
/// all int8: 29 dB (noise 1.26e-3)
/// op  macs  alone  without   alone: noise / mac        in context: (1.26e-3 − noise without) / mac
/// a   100   30 dB  30.00 dB  1.0e-3 / 100 = 1.0e-5 2nd  (1.26e-3 − 1.00e-3) / 100 = 2.6e-6 1st
/// b    10   35 dB  29.05 dB  3.2e-4 / 10  = 3.2e-5 1st  (1.26e-3 − 1.24e-3) / 10  = 1.4e-6 2nd
/// ```
/// An op whose floating adds noise sheds a negative amount: last. The in-context order only
/// where every op was measured so (`int8_db` given).
pub(super) fn op_orders(ops: &[RankedOp], int8_db: Option<f64>) -> Vec<Vec<RankedOp>> {
    let order_by = |per_mac: &dyn Fn(&RankedOp) -> f64| {
        let mut v: Vec<(f64, RankedOp)> = ops
            .iter()
            .map(|o| (per_mac(o) / o.macs.max(1) as f64, o.clone()))
            .collect();
        v.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.key.cmp(&b.1.key)));
        v.into_iter().map(|(_, o)| o).collect::<Vec<_>>()
    };
    let mut orders = vec![order_by(&|o| noise(o.db))];
    let measured = ops.iter().map(|o| o.without_db).collect::<Option<Vec<f64>>>();
    if let (Some(int8_db), Some(_)) = (int8_db, measured) {
        orders.push(order_by(&|o| noise(int8_db) - noise(o.without_db.unwrap_or(int8_db))));
    }
    orders
}

/// `config` with the op keyed `key` alone left float (step 4's in-context measurement).
pub(super) fn without_op(config: &QuantConfig, key: &str) -> QuantConfig {
    let mut c = config.clone();
    c.overrides.push(Override {
        pattern: key.to_string(),
        exclude: true,
        op_only: true,
        ..Default::default()
    });
    c
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

#[cfg(test)]
mod tests {
    use super::*;

    fn op(key: &str, macs: u64, db: f64, without_db: Option<f64>) -> RankedOp {
        RankedOp {
            key: key.into(),
            db,
            without_db,
            macs,
        }
    }

    fn keys(order: &[RankedOp]) -> Vec<&str> {
        order.iter().map(|o| o.key.as_str()).collect()
    }

    #[test]
    fn ops_are_ordered_alone_and_in_context_per_mac() {
        // the example of `op_orders`: all int8 at 29 dB; c's floating adds noise
        let ops = [
            op("a", 100, 30.0, Some(30.0)),
            op("b", 10, 35.0, Some(29.05)),
            op("c", 10, 41.0, Some(28.9)),
        ];
        let orders = op_orders(&ops, Some(29.0));
        assert_eq!(orders.len(), 2);
        assert_eq!(keys(&orders[0]), ["b", "a", "c"]);
        assert_eq!(keys(&orders[1]), ["a", "b", "c"]);
        // an op of no MACs counts as one; equal figures fall back to key order
        let tied = [op("y", 0, 30.0, None), op("x", 1, 30.0, None)];
        assert_eq!(keys(&op_orders(&tied, None)[0]), ["x", "y"]);
    }

    #[test]
    fn the_in_context_order_needs_every_op_measured_so() {
        let ops = [op("a", 100, 30.0, Some(30.0)), op("b", 10, 35.0, None)];
        assert_eq!(op_orders(&ops, Some(29.0)).len(), 1);
        assert_eq!(op_orders(&ops[..1], None).len(), 1);
        assert_eq!(op_orders(&ops[..1], Some(29.0)).len(), 2);
    }
}
