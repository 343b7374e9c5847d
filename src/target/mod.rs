//! `quantize --target-sqnr DB` (or `--target-top1 FRACTION`): reaches an output quality by
//! raising the fewest activations from int8 to int16, then to float, and where activations
//! cannot reach it, the fewest compute ops (weights and all) to float.
//!
//! The quality is a [`Goal`]: the worst output's SQNR on [`TARGET_SAMPLES`] scoring samples
//! spread over the data, or top-1 on all of them (accuracy against labels, or agreement with the float
//! model). The scoring samples are the calibration data's, or held-out `--validation` data.
//! Rankings (steps 1 and 4) use SQNR whatever the goal: top-1 on a few samples cannot rank.
//!
//! 1. Each activation point's own damage: the float model runs on the scoring samples, and the
//!    SQNR of every point's values against their int8 fake-quantized copy (the noise that
//!    point alone adds) ranks the points, worst first.
//! 2. The model is quantized with the `n` worst points raised, and scored — the SQNR of its
//!    worst output against the float model on the same samples.
//!    `n` doubles until the target holds, then a bisection finds the smallest such `n`; each
//!    step is one quantization and one evaluation.
//! 3. With every point at int16 (where the output format can hold int16) and the target still
//!    missed, the same search moves points to float, worst first. A target that every
//!    activation in float cannot reach goes on to step 4. An activation in float floats every
//!    op reading it: where the points found leave MACs float, step 4 runs too, and of the two
//!    the one that keeps the larger share of the MACs W8A8 is kept.
//! 4. The int8 weights are the limit then: compute ops are ranked by the output SQNR of the
//!    model with that op alone quantized (its weights and input, every other op float), on
//!    [`SENSITIVITY_SAMPLES`] samples spread over the scoring ones; ordered by that noise per MAC, so that the ops left
//!    float are the cheapest for what they cost. Where the target lies within
//!    [`IN_CONTEXT_DB`] of all int8, each op is also measured alone left float (every other op
//!    int8), and ordered by the noise that sheds per MAC; the search runs on both orders and
//!    keeps the result with the larger W8A8 share (`rank::op_orders`). The same search leaves the fewest float,
//!    every activation int8 (an int16 activation takes the ops reading it out of W8A8 too);
//!    where no number of ops in float reaches the target so, every activation int16 (where
//!    the output can hold int16) and the search again. Why the model and not the op's own weights: on
//!    ppocr_det every weight keeps 32–48 dB against its int8 copy, yet its first pointwise
//!    conv (weights 43.8 dB) alone brings the model to 27.6 dB — what an early layer's error
//!    becomes downstream, not its size, decides. A target that every op but one in float
//!    cannot reach is an error: nothing is written.
//!
//! 5. After each search, its raises are tried lowered one at a time ([`trim`]): an activation
//!    least damaging first (float to int8, else to int16; int16 to int8), a floated op the
//!    most MACs first; each stays lowered where the goal still holds. A ranking made one
//!    point at a time misorders some raises — one another made unneeded, or one that cost
//!    many MACs for little. On fer that keeps 68 % of the MACs W8A8 instead of 58 %. At most
//!    [`TRIM_TRIES`] tries, and not the ops that together hold under [`TRIM_MIN_MACS`] of
//!    the MACs.
//!
//! Every evaluation compares against the float model's outputs on the scoring samples,
//! computed once ([`float_outputs`]): only the quantized model runs per evaluation, which
//! halves a search's time on ppocr_det.
//!
//! Same-scale followers (a MaxPool's output reusing its input's scale) move with their source.

use crate::calibration::StatsFile;
use crate::evaluate::{evaluate, evaluate_outputs, float_outputs, EvalError, EvalOptions, EvalReport};
use crate::formats::data::Dataset;
use crate::quantize::{quantize_module, QuantConfig, QuantizeError};
use crate::run::RunError;
use melior::ir::Module;
use serde::Serialize;

mod rank;
mod trim;

use rank::{
    floated_ops, only_op, op_orders, prefix, raised_config, rank_points, weight_ops, without_op, Raise, RankedOp,
};

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
    #[error("target {target} is out of reach: all int8 gives {int8}, every activation in float {best} and every compute op but one in float {ops} on {samples} {scored_on} samples; nothing written — lower the target, or leave ops float with --exclude")]
    Unreachable {
        target: String,
        int8: String,
        best: String,
        ops: String,
        samples: usize,
        scored_on: &'static str,
    },
}

/// What a target asks of the quantized model.
#[derive(Debug, Clone, PartialEq)]
pub enum Goal {
    /// The SQNR of the worst output, dB, on [`TARGET_SAMPLES`] scoring samples spread over the
    /// data.
    SqnrDb(f64),
    /// The share of all scoring samples whose first output's argmax is right: against the
    /// integer array `labels` of the data where given, else the float model's argmax.
    Top1 { fraction: f64, labels: Option<String> },
}

impl Goal {
    /// The goal of the options `--target-sqnr`, `--target-top1` and `--labels` (Python's
    /// keywords of the same names); the front ends refuse both targets at once.
    pub fn from_options(sqnr_db: Option<f64>, top1: Option<f64>, labels: Option<String>) -> Option<Goal> {
        match (sqnr_db, top1) {
            (Some(db), _) => Some(Goal::SqnrDb(db)),
            (None, Some(fraction)) => Some(Goal::Top1 { fraction, labels }),
            (None, None) => None,
        }
    }
    fn threshold(&self) -> f64 {
        match self {
            Goal::SqnrDb(db) => *db,
            Goal::Top1 { fraction, .. } => *fraction,
        }
    }
    /// The samples scored: top-1 moves by 1/n a sample, so it takes every one.
    fn limit(&self) -> Option<usize> {
        match self {
            Goal::SqnrDb(_) => Some(TARGET_SAMPLES),
            Goal::Top1 { .. } => None,
        }
    }
    fn labels(&self) -> Option<String> {
        match self {
            Goal::SqnrDb(_) => None,
            Goal::Top1 { labels, .. } => labels.clone(),
        }
    }
    /// The goal's figure of an evaluation.
    fn value(&self, r: &EvalReport) -> f64 {
        match self {
            Goal::SqnrDb(_) => worst_sqnr_db(r),
            Goal::Top1 { labels, .. } => {
                let o = r.outputs.first();
                match labels {
                    Some(_) => o.and_then(|o| o.quantized_accuracy),
                    None => o.and_then(|o| o.top1_agreement),
                }
                .unwrap_or(0.0)
            }
        }
    }
    /// A figure in the goal's unit.
    pub fn show(&self, v: f64) -> String {
        match self {
            Goal::SqnrDb(_) => format!("{v:.2} dB"),
            Goal::Top1 { .. } => format!("top-1 {v:.4}"),
        }
    }
    /// The option that set it, as the command line spells it.
    pub fn flag(&self) -> String {
        match self {
            Goal::SqnrDb(db) => format!("--target-sqnr {db}"),
            Goal::Top1 { fraction, .. } => format!("--target-top1 {fraction}"),
        }
    }
}

impl std::fmt::Display for Goal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Goal::SqnrDb(db) => write!(f, "{db} dB"),
            Goal::Top1 {
                fraction,
                labels: Some(l),
            } => write!(f, "top-1 {fraction} (accuracy against labels '{l}')"),
            Goal::Top1 { fraction, labels: None } => write!(f, "top-1 {fraction} (agreement with the float model)"),
        }
    }
}

/// The linear noise of an SQNR in dB (the output's error energy over its signal's): what the
/// op search's orders and exchange add and compare.
fn noise(db: f64) -> f64 {
    10f64.powf(-db / 10.0)
}

/// The SQNR of the worst output (an exact output as 100 dB): a target holds for every output.
/// The mean let basic_pitch's onset output sit at 26 dB under a 30 dB target, its two other
/// outputs at 35 and 38.
fn worst_sqnr_db(r: &EvalReport) -> f64 {
    r.output_sqnrs_db().fold(100.0, f64::min)
}

/// An activation, or a compute op, the search raised above int8.
#[derive(Debug, Clone, Serialize)]
pub struct RaisedPoint {
    pub key: String,
    /// `activation` (the point's key) or `op` (a compute op's output key: its weights, its
    /// inputs and its output left float).
    pub kind: &'static str,
    /// `int16` or `float`.
    pub to: String,
    /// The SQNR of this point's values quantized to int8 alone, or of the model with this op
    /// alone quantized (why it was chosen).
    pub int8_sqnr_db: f64,
    /// For an op: the SQNR of the model with this op alone left float, every other op int8
    /// (the other reason it may be chosen).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub without_sqnr_db: Option<f64>,
}

/// What the search found. For an SQNR goal `target_db`, `int8_sqnr_db` and `sqnr_db` (the
/// worst output's SQNR on the scoring samples: all int8, then with the raised points); for a
/// top-1 goal `target_top1`, `int8_top1` and `top1`, and `top1_of` what it is measured against.
#[derive(Debug, Clone, Serialize)]
pub struct TargetReport {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_db: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub int8_sqnr_db: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sqnr_db: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_top1: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub int8_top1: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top1: Option<f64>,
    /// `labels 'NAME'` or `the float model`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top1_of: Option<String>,
    /// The goal: its text, unit and option for the summary line and the marks.
    #[serde(skip)]
    pub goal: Goal,
    pub samples: usize,
    /// `calibration` or `validation` (`--validation`'s samples).
    pub scored_on: &'static str,
    pub points: usize,
    pub raised: Vec<RaisedPoint>,
    /// Quantize + evaluate rounds the search made.
    pub evaluations: usize,
    pub seconds: f64,
}

impl TargetReport {
    /// All int8's figure and the one reached, in the goal's unit.
    pub fn figures(&self) -> (f64, f64) {
        let (base, got) = match self.goal {
            Goal::SqnrDb(_) => (self.int8_sqnr_db, self.sqnr_db),
            Goal::Top1 { .. } => (self.int8_top1, self.top1),
        };
        (base.unwrap_or(f64::NAN), got.unwrap_or(f64::NAN))
    }
    /// Each raised value's key with why, as the model written records them
    /// (`precision::mark_raised`) for `evaluate --per-layer` and its report.
    pub fn marks(&self) -> Vec<(String, String)> {
        let t = self.goal.flag();
        self.raised
            .iter()
            .map(|p| {
                let why = match (p.kind, p.to.as_str()) {
                    ("op", _) => format!(
                        "left float by {t} (the model with this op alone int8: {:.1} dB{})",
                        p.int8_sqnr_db,
                        p.without_sqnr_db
                            .map(|w| format!("; with this op alone float: {w:.1} dB"))
                            .unwrap_or_default()
                    ),
                    (_, "float") => format!("left float by {t} (int8 alone: {:.1} dB)", p.int8_sqnr_db),
                    (_, to) => format!("raised to {to} by {t} (int8 alone: {:.1} dB)", p.int8_sqnr_db),
                };
                (p.key.clone(), why)
            })
            .collect()
    }
}

/// The recipe with the search's raises as overrides (what `--json` and the summary report).
pub struct Reached {
    pub config: QuantConfig,
    pub report: TargetReport,
}

/// The samples a target is scored on, spread over the calibration or validation data
/// (`run::picked_samples`; a calibration stream keeps the same ones as it is read).
pub const TARGET_SAMPLES: usize = 16;

/// The most raises (or floated ops) the trim after a search tries lowering: each try is one
/// quantization and one evaluation, as many as the search itself makes on a large model.
const TRIM_TRIES: usize = 32;

/// Floated ops holding together less than this share of the model's MACs are not tried int8
/// again: they cannot move `int8_mac_share` by more.
const TRIM_MIN_MACS: f64 = 0.01;

/// The most floated ops the exchange after a trim tries int8 again with cheaper ones floated
/// for them ([`trim::exchange`]): two evaluations each, after one per op left int8.
const EXCHANGE_TRIES: usize = 16;

/// Step 4 also ranks the ops in context (each alone left float, every other one int8) where
/// the target lies at most this far above all int8, i.e. asks to shed at most half of its
/// noise: the in-context figures are each op's effect on the all-int8 model, which the model
/// stays near while few ops go float. On ppocr_cls (29.6 dB under a 30 dB target) it keeps all
/// of the MACs W8A8 instead of 92.5 %, on fer with `--gptq-asymmetric` (29.1 dB) 92.8 % instead
/// of 74.6 %; farther off it found nothing better: ppocr_det with `--gptq-asymmetric` (24.8 dB)
/// 50.3 % against 72.2 %, with the defaults (20.9 dB) no more, at 3× the search's time.
const IN_CONTEXT_DB: f64 = 3.0;

/// The samples each op's sensitivity is measured on (step 4), spread over the scoring ones.
/// It was 4 while every evaluation ran the float model too. With the float outputs computed
/// once, all 16 cost ppocr_det's search 51 → 60 s, and it ends with 66 % of the MACs W8A8
/// instead of 64 %; the other shared models end with the same share.
pub const SENSITIVITY_SAMPLES: usize = 16;

/// Searches the fewest raised activations that bring the model to `goal` on `data`
/// (`scored_on`: `calibration` or `validation`). `load` gives a fresh copy of the float
/// model (lowered as the output needs); `writable` says whether the output format can hold a
/// quantized module (an ONNX model of an old opset cannot hold int16 Q/DQ), and why not.
#[allow(clippy::too_many_arguments)]
pub fn reach_target<'c>(
    load: &dyn Fn() -> Result<Module<'c>, TargetError>,
    writable: &dyn Fn(&Module) -> Result<(), String>,
    stats: &StatsFile,
    config: &QuantConfig,
    data: &Dataset,
    scored_on: &'static str,
    goal: &Goal,
    threads: usize,
    overrides: &[(String, String)],
    say: &mut dyn FnMut(String),
) -> Result<Reached, TargetError> {
    let t0 = std::time::Instant::now();
    let target = goal.threshold();
    // the scoring samples, spread over the data: what the activations are ranked on
    let opts = EvalOptions {
        threads,
        limit: Some(TARGET_SAMPLES),
        spread: true,
        overrides: overrides.to_vec(),
        ..Default::default()
    };
    // what the goal is scored on
    let goal_opts = EvalOptions {
        limit: goal.limit(),
        labels: goal.labels(),
        ..opts.clone()
    };
    let float = load()?;
    // the float model's outputs on the scoring samples, computed once: every evaluation ran
    // the float model again on the same samples (`None` where they would not fit in memory)
    let reference = float_outputs(&float, data, &goal_opts)?;
    let evaluations = std::cell::Cell::new(0);
    // how many samples a score is over (fewer than asked where the data hold fewer)
    let scored = std::cell::Cell::new(0);
    // among the scoring samples, as a stream's kept ones give them
    let few = EvalOptions {
        limit: Some(SENSITIVITY_SAMPLES),
        among: Some(TARGET_SAMPLES),
        ..opts.clone()
    };
    // all the model's MACs, whatever a config leaves float (set by every evaluation)
    let total_macs = std::cell::Cell::new(0u64);
    // the evaluation of `c`'s model against the float outputs `reference` (side by side with
    // the float model where there are none), and the MACs of the op keyed `macs_of` in it
    let score_on =
        |c: &QuantConfig, opts: &EvalOptions, macs_of: Option<&str>| -> Result<(EvalReport, u64), TargetError> {
            let m = load()?;
            let report = quantize_module(&m, stats, c)?;
            let r = match &reference {
                Some(f) => evaluate_outputs(f, &m, data, opts)?,
                None => evaluate(&float, &m, data, opts)?,
            };
            evaluations.set(evaluations.get() + 1);
            total_macs.set(report.summary.totals.macs);
            // (counted at the calibration data's shapes where dims are dynamic)
            let macs = macs_of
                .and_then(|k| report.summary.ops.iter().find(|o| o.key == k))
                .and_then(|o| o.macs)
                .unwrap_or(0);
            Ok((r, macs))
        };
    // the goal's figure of `c`'s model
    let score = |c: &QuantConfig| -> Result<f64, TargetError> {
        let (r, _) = score_on(c, &goal_opts, None)?;
        scored.set(r.samples);
        Ok(goal.value(&r))
    };
    let base = score(config)?;
    let ranked = rank_points(&load()?, stats, config, data, &opts)?;
    let n = ranked.len();
    let samples = scored.get();
    let done = |c: QuantConfig, points: &[Raise], db: f64, ops: &[&RankedOp]| {
        let raised = points
            .iter()
            .map(|r| RaisedPoint {
                key: ranked[r.index].0.clone(),
                kind: "activation",
                to: if r.float { "float" } else { "int16" }.into(),
                int8_sqnr_db: ranked[r.index].2,
                without_sqnr_db: None,
            })
            .chain(ops.iter().map(|o| RaisedPoint {
                key: o.key.clone(),
                kind: "op",
                to: "float".into(),
                int8_sqnr_db: o.db,
                without_sqnr_db: o.without_db,
            }))
            .collect();
        let sqnr = matches!(goal, Goal::SqnrDb(_));
        let top1_of = match goal {
            Goal::SqnrDb(_) => None,
            Goal::Top1 { labels: Some(l), .. } => Some(format!("labels '{l}'")),
            Goal::Top1 { labels: None, .. } => Some("the float model".into()),
        };
        Reached {
            config: c,
            report: TargetReport {
                target_db: sqnr.then_some(target),
                int8_sqnr_db: sqnr.then_some(base),
                sqnr_db: sqnr.then_some(db),
                target_top1: (!sqnr).then_some(target),
                int8_top1: (!sqnr).then_some(base),
                top1: (!sqnr).then_some(db),
                top1_of,
                goal: goal.clone(),
                samples,
                scored_on,
                points: n,
                raised,
                evaluations: evaluations.get(),
                seconds: t0.elapsed().as_secs_f64(),
            },
        }
    };
    if base >= target {
        return Ok(done(config.clone(), &[], base, &[]));
    }
    say(format!(
        "target {goal}: all int8 gives {} on {samples} {scored_on} samples; searching {n} activations",
        goal.show(base)
    ));
    // smallest k in 1..=n with ok(k), by doubling then bisection; None when ok(n) fails
    let search = |n: usize, make: &dyn Fn(usize) -> QuantConfig| -> Result<Option<(usize, f64)>, TargetError> {
        let (mut lo, mut hi, mut k) = (0usize, None, 1usize);
        let mut best = None;
        while hi.is_none() {
            let k_try = k.min(n);
            let db = score(&make(k_try))?;
            if db >= target {
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
            if db >= target {
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
        quantize_module(&m, stats, &raised_config(config, &ranked, &prefix(n, 0), goal))?;
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
    // the share of the MACs a config leaves W8A8 (None where the MACs are not known)
    let share = |c: &QuantConfig| -> Result<Option<f64>, TargetError> {
        let m = load()?;
        Ok(quantize_module(&m, stats, c)?.summary.totals.int8_mac_share)
    };
    let mut by_activations = None;
    if n > 0 {
        // (points in int16, points in float, score): int16 first, where it can be written
        let mut found = None;
        if n16 > 0 {
            found = search(n, &|k| raised_config(config, &ranked, &prefix(k, 0), goal))?.map(|(k, db)| (k, 0, db));
        }
        if found.is_none() {
            found = search(n, &|k| raised_config(config, &ranked, &prefix(n16, k), goal))?.map(|(k, db)| (n16, k, db));
        }
        if let Some((i16, fl, mut db)) = found {
            // each raise lowered in turn, the least damaging first: a float point to int8,
            // else to int16 where int16 can be written; an int16 one to int8
            let raises = prefix(i16, fl);
            let order: Vec<usize> = (0..raises.len()).rev().take(TRIM_TRIES).collect();
            let lowered = |r: &Raise| {
                let mut v = vec![None];
                if r.float && n16 > 0 {
                    v.push(Some(Raise { float: false, ..*r }));
                }
                v
            };
            let before = raises.len();
            let raises = trim::trim(
                raises,
                &order,
                &lowered,
                &mut |r| score(&raised_config(config, &ranked, r, goal)),
                target,
                &mut db,
            )?;
            if raises.len() < before {
                say(format!(
                    "target: {} of {before} raised activations lowered back to int8",
                    before - raises.len()
                ));
            }
            let c = raised_config(config, &ranked, &raises, goal);
            // a raised activation takes every op that reads it out of W8A8: where that
            // leaves MACs so, leaving ops float instead may keep more of them int8
            let s = share(&c)?;
            if s.is_none_or(|s| s >= 1.0) {
                return Ok(done(c, &raises, db, &[]));
            }
            by_activations = Some((done(c, &raises, db, &[]), s));
        }
    }
    let best = if n == 0 {
        base
    } else {
        score(&raised_config(config, &ranked, &prefix(n16, n), goal))?
    };
    // the weights are the limit (or floating activations floated more MACs than needed): ops
    // to float, most damaging first, one op kept quantized (a float model is not what was
    // asked for)
    let keys = weight_ops(&load()?, stats, config)?;
    say(match &by_activations {
        Some((r, s)) => format!(
            "target: {} activations raised reach it with {:.1} % of the MACs int8; measuring {} compute ops one at a time on {SENSITIVITY_SAMPLES} samples to keep more",
            r.report.raised.len(),
            100.0 * s.unwrap_or(0.0),
            keys.len()
        ),
        None => format!(
            "target: every activation in float gives {}; measuring {} compute ops one at a time on {SENSITIVITY_SAMPLES} samples",
            goal.show(best),
            keys.len()
        ),
    });
    // each op measured alone quantized (every other op float), and where the target lies
    // near all int8, alone left float too (every other op int8); `op_orders` ranks them. All
    // int8 is scored again on the sensitivity samples, which its in-context figures compare
    // with (the scoring samples while both counts are 16)
    let int8_db = match goal {
        Goal::SqnrDb(_) if target - base <= IN_CONTEXT_DB => Some(worst_sqnr_db(&score_on(config, &few, None)?.0)),
        _ => None,
    };
    let mut measured: Vec<RankedOp> = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let (r, macs) = score_on(&only_op(config, &keys, i), &few, Some(key))?;
        let without_db = match int8_db {
            Some(_) => Some(worst_sqnr_db(&score_on(&without_op(config, key), &few, None)?.0)),
            None => None,
        };
        measured.push(RankedOp {
            key: key.clone(),
            db: worst_sqnr_db(&r),
            without_db,
            macs,
        });
    }
    let m = measured.len().saturating_sub(1);
    let orders = op_orders(&measured, int8_db);
    say(format!(
        "target: searching {m} of {} compute ops to leave float, most damaging first ({})",
        measured.len(),
        if orders.len() > 1 {
            "ranked alone, then in context"
        } else {
            "ranked alone"
        }
    ));
    // a result found before the op search, with the search's whole cost
    let counted = |mut r: Reached| {
        r.report.evaluations = evaluations.get();
        r.report.seconds = t0.elapsed().as_secs_f64();
        r
    };
    // the ops at `floated` of `ops` to float with the activations of `n_int16` points in
    // int16, the others int8
    let with_ops = |ops: &[RankedOp], n_int16: usize, floated: &[usize]| {
        floated_ops(
            raised_config(config, &ranked, &prefix(n_int16, 0), goal),
            ops,
            floated,
            goal,
        )
    };
    let first = |k: usize| (0..k).collect::<Vec<usize>>();
    // the fewest ops of the order `ops` to leave float, and the trim after
    let search_ops = |ops: &[RankedOp],
                      say: &mut dyn FnMut(String)|
     -> Result<Option<(Reached, Option<f64>)>, TargetError> {
        // int8 activations first: an int16 activation takes the ops reading it out of W8A8
        // too; all of them in int16 only where int8 ones cannot reach the target with any op
        // float
        let bases = if n16 > 0 { vec![0, n16] } else { vec![0] };
        for &a16 in bases.iter().filter(|_| m > 0) {
            let Some((k, mut db)) = search(m, &|k| with_ops(ops, a16, &first(k)))? else {
                continue;
            };
            // each floated op tried int8 again, the most MACs first: the order is by each
            // op's noise per MAC in one context, and what others left float changes what
            // one costs
            let total = total_macs.get();
            let mut order: Vec<usize> = (0..k).collect();
            order.sort_by(|&a, &b| ops[b].macs.cmp(&ops[a].macs).then(a.cmp(&b)));
            // ops that together hold too few MACs to move the share are not tried
            let mut rest: u64 = order.iter().map(|&i| ops[i].macs).sum();
            let order: Vec<usize> = order
                .into_iter()
                .take_while(|&i| {
                    let tried = rest as f64 >= TRIM_MIN_MACS * total as f64;
                    rest -= ops[i].macs;
                    tried
                })
                .take(TRIM_TRIES)
                .collect();
            // the goal's figure with the ops at `f` of `ops` float
            let mut score_floated = |f: &[usize]| score(&with_ops(ops, a16, f));
            let floated = trim::trim(first(k), &order, &|_| vec![None], &mut score_floated, target, &mut db)?;
            if floated.len() < k {
                say(format!(
                    "target: {} of {k} floated compute ops quantized again",
                    k - floated.len()
                ));
            }
            // then the big ones tried int8 again with cheaper ones floated for them
            let macs_of = |f: &[usize]| f.iter().map(|&i| ops[i].macs).sum::<u64>();
            let before = macs_of(&floated);
            let floated = trim::exchange(
                floated,
                ops.len(),
                &|i| ops[i].macs,
                &mut score_floated,
                target,
                &mut db,
                EXCHANGE_TRIES,
                (TRIM_MIN_MACS * total as f64) as u64,
            )?;
            if macs_of(&floated) < before {
                say(format!(
                        "target: floated ops exchanged for cheaper ones: {} left float, {:.1} % of the MACs float instead of {:.1} %",
                        floated.len(),
                        100.0 * macs_of(&floated) as f64 / total.max(1) as f64,
                        100.0 * before as f64 / total.max(1) as f64
                    ));
            }
            let left: Vec<&RankedOp> = floated.iter().map(|&i| &ops[i]).collect();
            let c = with_ops(ops, a16, &floated);
            let s = share(&c)?;
            return Ok(Some((done(c, &prefix(a16, 0), db, &left), s)));
        }
        Ok(None)
    };
    // of the activations' result and the two orders' ones, the one that keeps the most MACs
    // int8 (the first of equals)
    let mut best_found = by_activations;
    for (ops, by) in orders.iter().zip(["ranked alone", "ranked in context"]) {
        if let Some((r, s)) = search_ops(ops, say)? {
            if orders.len() > 1 {
                say(format!(
                    "target: {by}, {} compute ops left float keep {:.1} % of the MACs int8",
                    r.report.raised.iter().filter(|p| p.kind == "op").count(),
                    100.0 * s.unwrap_or(0.0)
                ));
            }
            if best_found
                .as_ref()
                .is_none_or(|(_, b)| s.unwrap_or(0.0) > b.unwrap_or(0.0))
            {
                best_found = Some((r, s));
            }
        }
    }
    if let Some((r, _)) = best_found {
        return Ok(counted(r));
    }
    // out of reach: a model below the target is not what was asked for
    let ops_db = if m == 0 {
        best
    } else {
        score(&with_ops(&orders[0], n16, &first(m)))?
    };
    Err(TargetError::Unreachable {
        target: goal.to_string(),
        int8: goal.show(base),
        best: goal.show(best),
        ops: goal.show(ops_db),
        samples,
        scored_on,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::OutputReport;

    fn report(sqnrs: &[Option<f64>]) -> EvalReport {
        let outputs: Vec<OutputReport> = sqnrs
            .iter()
            .enumerate()
            .map(|(i, &sqnr_db)| OutputReport {
                name: format!("out{i}"),
                sqnr_db,
                cosine: None,
                max_abs_error: 0.0,
                top1_agreement: None,
                float_accuracy: None,
                quantized_accuracy: None,
            })
            .collect();
        EvalReport {
            samples: 16,
            sqnr_db: sqnrs[0],
            cosine: None,
            max_abs_err: 0.0,
            top1_float: None,
            top1_quant: None,
            top1_agreement: None,
            outputs,
            layers: Vec::new(),
            first_sharp_drop: None,
            histograms: Vec::new(),
            simulated_onnxruntime_x86: None,
        }
    }

    #[test]
    fn an_sqnr_target_holds_for_the_worst_output() {
        let goal = Goal::SqnrDb(30.0);
        // basic_pitch's three outputs under a 30 dB target scored by their mean (33.2 dB)
        assert_eq!(goal.value(&report(&[Some(26.29), Some(38.15), Some(35.10)])), 26.29);
        // an exact output counts as 100 dB, never as the worst
        assert_eq!(goal.value(&report(&[None, Some(31.5)])), 31.5);
        assert_eq!(goal.value(&report(&[Some(140.0)])), 100.0);
    }
}
