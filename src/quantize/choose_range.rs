//! `--choose-range`: each activation's range chosen on its own — of the candidate methods
//! (min/max, percentile, MSE, entropy), the one whose rounding changes the outputs of the ops
//! that read it least on calibration samples.
//!
//! One method for a whole model leaves accuracy behind where points differ: min/max is best on
//! ppocr_cls by 12 dB, percentile on ppocr_det by 2.4 (BENCHMARKS.md). Every candidate is read
//! off the one histogram calibration filled, so choosing costs no second calibration. A
//! point's candidates are scored where its error matters, at its consumers:
//!
//! ```text
//! %x = onnx.Relu(...)            // the point: candidates r₁, r₂, r₃ from its histogram
//! %y = onnx.Conv(%x, %w, %b)     // run on float %x, then on fq(%x, rᵢ) with all else float:
//!                                //   score(rᵢ) = Σ_samples ‖Conv(x) − Conv(fq(x, rᵢ))‖²
//! ```
//!
//! Each point is scored from float inputs, alone, so its choice does not depend on the order
//! of the others'.

use super::local_op::LocalOp;
use super::{plan, QuantConfig, QuantizeError};
use crate::calibration::{Method, State, StatsFile};
use crate::interp::{Program, Watch};
use crate::ir::graph::{find_function, uses};
use crate::params::{fake_quant, Rounding};
use crate::tensor::Tensor;
use melior::ir::{Module, Value};
use std::collections::HashMap;

/// What [`choose_ranges`] chose.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RangeChoice {
    /// Candidate method names, in the order given, with how many points took each.
    pub taken: Vec<(String, usize)>,
    /// Points with no consumer the interpreter could score (or no histogram): their range is
    /// the calibration method's.
    pub unscored: usize,
    /// Samples scored on.
    pub samples: usize,
}

impl std::fmt::Display for RangeChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let taken: Vec<String> = self.taken.iter().map(|(m, n)| format!("{m} {n}")).collect();
        write!(
            f,
            "ranges chosen per activation on {} calibration samples: {}",
            self.samples,
            taken.join(", ")
        )?;
        if self.unscored > 0 {
            write!(f, "; {} not scored (no consumer the interpreter runs)", self.unscored)?;
        }
        Ok(())
    }
}

/// A point being chosen for: its key, candidate parameters, consumers and running scores.
struct Point {
    key: String,
    candidates: Vec<(usize, (f32, f32), crate::params::QuantParams)>,
    consumers: Vec<LocalOp>,
    error: Vec<f64>,
}

/// Sets, for every activation point of the plan whose statistics hold a histogram, the range
/// of the candidate method (names as `--method` takes them) whose fake quantization changes
/// its consumers' outputs least over `samples` (each the inputs of one run of `module`, which
/// is prepared and calibrated). Points a recipe gives a method keep it.
pub fn choose_ranges(
    module: &Module,
    stats: &mut StatsFile,
    config: &QuantConfig,
    candidates: &[(String, Method)],
    samples: &[Vec<Tensor>],
) -> Result<RangeChoice, QuantizeError> {
    let scoring = |m: String| QuantizeError::Stats(format!("choosing ranges: {m}"));
    let plan = plan(module, Some(stats), config)?;
    let func = find_function(module, None)?;
    let program = Program::compile(module, None).map_err(|e| scoring(e.to_string()))?;
    let folded: HashMap<&str, &Tensor> = program.constant_values().collect();
    let mut points: Vec<Point> = Vec::new();
    let mut unscored = 0usize;
    for a in plan
        .activations
        .iter()
        .filter(|a| a.same_as.is_none() && a.method.is_none())
    {
        let Some(t) = stats.tensors.get(&a.key) else {
            continue;
        };
        if !matches!(t.observer.state, State::Histogram(_)) {
            unscored += 1;
            continue;
        }
        let mut cands = Vec::new();
        for (i, (_, method)) in candidates.iter().enumerate() {
            let mut o = t.observer.clone();
            o.method = *method;
            let Some(r) = o.range() else { continue };
            let p = plan::activation_params(config, a.scheme, a.dtype, r)
                .map_err(|e| scoring(format!("tensor '{}': {e}", a.key)))?;
            cands.push((i, r, p));
        }
        let consumers = consumers_of(a.value, func, &folded);
        if cands.len() < 2 || consumers.is_empty() {
            unscored += 1;
            continue;
        }
        let n = cands.len();
        points.push(Point {
            key: a.key.clone(),
            candidates: cands,
            consumers,
            error: vec![0.0; n],
        });
    }
    drop(plan);
    let known: std::collections::HashSet<&str> = program.values.iter().map(|v| v.key.as_str()).collect();
    let mut keys: Vec<String> = Vec::new();
    for p in &points {
        keys.push(p.key.clone());
        for c in &p.consumers {
            keys.extend(c.runtime_keys().map(str::to_string));
        }
    }
    keys.retain(|k| known.contains(k.as_str()));
    keys.sort();
    keys.dedup();
    let watch: Watch = program.watch(&keys).map_err(|e| scoring(e.to_string()))?;
    for inputs in samples {
        let mut seen: HashMap<String, Tensor> = HashMap::new();
        program
            .run_observed(inputs, &watch, &mut |k, t| {
                seen.insert(k.to_string(), t.clone());
                Ok(())
            })
            .map_err(|e| scoring(e.to_string()))?;
        for p in points.iter_mut() {
            score(p, &seen).map_err(|e| scoring(format!("tensor '{}': {e}", p.key)))?;
        }
    }
    let mut taken: Vec<(String, usize)> = candidates.iter().map(|(n, _)| (n.clone(), 0)).collect();
    for p in &points {
        // the first of equal scores: candidates are in the order given
        let best = (0..p.error.len())
            .min_by(|&a, &b| p.error[a].total_cmp(&p.error[b]))
            .expect("two candidates or more");
        let (i, range, _) = p.candidates[best];
        taken[i].1 += 1;
        if let Some(t) = stats.tensors.get_mut(&p.key) {
            t.range = range;
        }
    }
    Ok(RangeChoice {
        taken,
        unscored,
        samples: samples.len(),
    })
}

/// The ops reading `v` that the interpreter can run alone, with their operands resolved.
fn consumers_of<'c, 'a>(
    v: Value<'c, 'a>,
    func: melior::ir::OperationRef<'c, 'a>,
    folded: &HashMap<&str, &Tensor>,
) -> Vec<LocalOp> {
    let mut owners = Vec::new();
    for u in uses(v) {
        if !owners.contains(&u.owner) {
            owners.push(u.owner);
        }
    }
    owners
        .into_iter()
        .filter_map(|op| LocalOp::new(op, v, func, folded, &[]))
        .collect()
}

/// Adds one sample's squared consumer-output errors of each candidate to `p.error`.
fn score(p: &mut Point, seen: &HashMap<String, Tensor>) -> Result<(), String> {
    let Some(point @ Tensor::F32(x)) = seen.get(&p.key) else {
        return Ok(());
    };
    let quantized: Vec<Tensor> = p
        .candidates
        .iter()
        .map(|(_, _, q)| fake_quant(&x.view(), q, Rounding::HalfEven).map(Tensor::F32))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    for c in &p.consumers {
        let Some(y) = c.run(point, seen)? else {
            continue;
        };
        for (k, q) in quantized.iter().enumerate() {
            let Some(yq) = c.run(q, seen)? else {
                continue;
            };
            p.error[k] += y
                .iter()
                .zip(yq.iter())
                .map(|(a, b)| {
                    let d = (*a - *b) as f64;
                    // a candidate whose rounding makes a consumer overflow loses
                    if d.is_finite() {
                        d * d
                    } else {
                        f64::MAX / 1e6
                    }
                })
                .sum::<f64>();
        }
    }
    Ok(())
}
