//! Bias correction (Nagel et al., "Data-Free Quantization Through Weight Equalization and Bias
//! Correction", ICCV 2019, §4.2, in its empirical form; NNCF's fast bias correction): the mean
//! shift that quantizing a layer's weights and input causes in its output on calibration
//! samples, taken off the layer's bias before the bias is quantized.
//!
//! ```text
//! %y = onnx.Conv(%x, %w, %b)
//!   shift[c] = mean over samples and positions of (Conv(fq(x), fq(w), b) − Conv(x, w, b))[c]
//!   b[c] ← b[c] − shift[c]          // then int32 at input scale × weight scale, as ever
//! ```
//!
//! Rounding to nearest is unbiased per value but not per channel: a channel's rounded weights
//! sum to a little more or less than its float ones, and an input clipped at its range loses
//! a one-sided mass; either moves the channel's mean output by an amount the next layers read
//! as signal. Each layer is measured from float inputs, alone (its own rounding, not its
//! inputs' drift), so the shifts do not depend on each other and one float run per sample
//! measures them all. A layer whose input stays float (weight-only, or raised to float) keeps
//! a float bias, which takes the shift of its weights' rounding alone: with a quality target,
//! which may raise a quantized input to float, that shift is measured beside the other for
//! every layer, and the rewriter takes the one the input's final precision calls for. An ONNX
//! Conv, ConvTranspose or Gemm without a bias is given one of zeros for its shift; other
//! layers without a constant bias are counted, not corrected.
//!
//! [`sequential`] measures the shifts in the quantized model instead, wave by wave.

pub mod sequential;

use super::{plan, QuantConfig, QuantizeError};
use crate::calibration::StatsFile;
use crate::interp::fusion::ChannelAxis;
use crate::interp::Program;
use crate::ir::attrs::op_attrs;
use crate::ir::graph::{body_ops, find_function, op_name};
use crate::ir::keys::TensorKeys;
use crate::params::{fake_quant, QuantParams, Rounding};
use crate::passes::quantize_weights::{
    float_bias, gptq_rounded, lacks_own_bias, weight_params, weight_site, WeightSite,
};
use crate::quantize::waves::Waves;
use crate::recipe::WeightMode;
use crate::run::{run_samples_fold, Feed};
use crate::tensor::Tensor;
use melior::ir::operation::OperationLike;
use melior::ir::{Module, OperationRef, Value};
use ndarray::{ArrayD, Axis};
use std::collections::{BTreeMap, HashMap};

use super::local_op::LocalOp;

/// What [`measure_bias_shifts`] measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BiasCorrection {
    /// The shift of each corrected layer, by its output key.
    pub shifts: BTreeMap<String, Vec<f32>>,
    /// Where asked for ([`measure_bias_shifts`]' `float_inputs_too`), the shift of each layer
    /// with a quantized input had that input stayed float — its weights' rounding alone —
    /// for a layer whose input a quality target raises to float.
    pub float_input_shifts: BTreeMap<String, Vec<f32>>,
    /// Quantized layers with no constant bias to take a shift.
    pub without_bias: usize,
    pub samples: usize,
    /// Measured in the quantized model in this many waves ([`sequential`]); 0: each layer alone.
    pub waves: usize,
    /// Layers left uncorrected, with why.
    pub left: Vec<(String, String)>,
    /// The layer whose largest channel shift is the largest share of the standard deviation
    /// of its output, and the share.
    pub largest: Option<(String, f64)>,
}

impl std::fmt::Display for BiasCorrection {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "bias correction: {} layers on {} calibration samples",
            self.shifts.len(),
            self.samples
        )?;
        if self.waves > 0 {
            write!(f, ", measured in the quantized model in {} waves", self.waves)?;
        }
        if let Some((k, share)) = &self.largest {
            write!(f, " (largest shift {:.2} % of its output's std, {k})", 100.0 * share)?;
        }
        if self.without_bias > 0 {
            write!(f, "; {} without a bias to correct", self.without_bias)?;
        }
        write!(f, "{}", crate::text::first_of(&self.left, "left uncorrected"))
    }
}

impl BiasCorrection {
    /// Adds the shift of the layer of `out_key` from its sums over samples `t` (with
    /// `float_too`, its shift on float inputs too); nothing where no value was counted.
    fn add_layer(&mut self, out_key: String, t: &Sums, float_too: bool) {
        if t.count == 0 {
            return;
        }
        let m = t.count as f64;
        let shift: Vec<f32> = t.diff.iter().map(|d| (d / m) as f32).collect();
        if float_too {
            let float: Vec<f32> = t.diff_float.iter().map(|d| (d / m) as f32).collect();
            self.float_input_shifts.insert(out_key.clone(), float);
        }
        // the largest channel shift against the spread of the layer's whole output
        let all = m * shift.len() as f64;
        let mean = t.sum / all;
        let std = (t.sum_sq / all - mean * mean).max(0.0).sqrt();
        let top = shift.iter().fold(0f64, |a, s| a.max(s.abs() as f64));
        let share = if std > 0.0 { top / std } else { 0.0 };
        if self.largest.as_ref().is_none_or(|(_, s)| share > *s) {
            self.largest = Some((out_key.clone(), share));
        }
        self.shifts.insert(out_key, shift);
    }
}

/// One layer being measured.
struct Layer {
    /// The compute op's output key (the rewriter's `bias_shifts` key) and runtime key.
    out_key: String,
    out_value: String,
    /// The activation input's runtime key and its quantization (`None`: it stays float, and
    /// the weights' rounding is all the shift).
    input: String,
    input_params: Option<QuantParams>,
    /// Also measure the shift with the input float (where it is quantized).
    float_too: bool,
    /// The op with quantized weights, run on the fake-quantized input.
    quantized: LocalOp,
    channel_axis: ChannelAxis,
    /// The bias's length; `None` for an op given a bias by the rewriter (its output's channels).
    channels: Option<usize>,
    /// Every runtime key the layer reads (input, float output, other operands), once each.
    keys: Vec<String>,
}

/// A layer's sums over samples: per channel Σ (quantized − float) and the values counted;
/// over the whole output Σ float and Σ float² (for the report).
#[derive(Clone, Default)]
struct Sums {
    diff: Vec<f64>,
    /// Σ (quantized weights on the float input − float) per channel, where measured.
    diff_float: Vec<f64>,
    count: u64,
    sum: f64,
    sum_sq: f64,
}

impl Sums {
    fn add(&mut self, o: &Sums) {
        add_channels(&mut self.diff, &o.diff);
        add_channels(&mut self.diff_float, &o.diff_float);
        self.count += o.count;
        self.sum += o.sum;
        self.sum_sq += o.sum_sq;
    }
}

/// Adds per-channel sums `o` to `a` (empty until the first sample's).
fn add_channels(a: &mut Vec<f64>, o: &[f64]) {
    if a.is_empty() {
        *a = vec![0.0; o.len()];
    }
    a.iter_mut().zip(o).for_each(|(a, b)| *a += b);
}

/// One sample in flight: the watched values its layers still need, and its layers' sums.
struct Sample {
    seen: HashMap<String, Tensor>,
    /// Uses left of each key in `seen`.
    left: HashMap<String, usize>,
    sums: Vec<Option<Sums>>,
}

/// The axis of a compute op's output that its bias runs along: channels of NCHW for ONNX's
/// convolutions and a BiasAdd in NCHW, the last axis otherwise (ONNX Gemm's C, a rank-1 Add's
/// broadcast, TF's NHWC).
fn bias_axis(bias_owner: melior::ir::OperationRef, own_bias: bool) -> ChannelAxis {
    let name = op_name(&bias_owner);
    let nchw = (own_bias && matches!(name.as_str(), "onnx.Conv" | "onnx.ConvTranspose"))
        || op_attrs(&bias_owner)
            .get("data_format")
            .and_then(|v| v.as_str())
            .is_some_and(|f| f.starts_with("NC"));
    if nchw {
        ChannelAxis::Second
    } else {
        ChannelAxis::Last
    }
}

/// A layer whose bias can take a shift, as the prepared module has it.
struct BiasSite<'c, 'a> {
    op: OperationRef<'c, 'a>,
    site: WeightSite<'c, 'a>,
    /// The activation input, its runtime key and its quantization (`None`: it stays float).
    x: Value<'c, 'a>,
    input: String,
    input_params: Option<QuantParams>,
    /// The op's output's runtime key: where its shift is measured.
    out_value: String,
    channel_axis: ChannelAxis,
    /// The bias's length; `None` for an op given a bias by the rewriter (its output's channels).
    channels: Option<usize>,
    /// The wave of its input ([`crate::quantize::waves`]).
    wave: usize,
}

/// The layers of `func` whose int8/int4 weight `config` quantizes and whose bias can take a
/// shift, in program order, with their inputs' quantization as `plan` says; and how many
/// such layers have no constant bias to take one.
fn bias_sites<'c, 'a>(
    func: OperationRef<'c, 'a>,
    plan: &super::Plan,
    config: &QuantConfig,
) -> (Vec<BiasSite<'c, 'a>>, usize) {
    let tensor_keys = TensorKeys::new(func);
    let key_of = |v: Value| tensor_keys.get(v).map(str::to_string);
    let mut waves = Waves::default();
    let (mut sites, mut without_bias) = (Vec::new(), 0usize);
    for op in body_ops(func) {
        let site = weight_site(op, config).filter(|s| matches!(s.res.weights, WeightMode::Int8 | WeightMode::Int4));
        waves.visit(op, &tensor_keys, site.is_some());
        let Some(site) = site else { continue };
        let Some(x) = site.rule.activations.first().and_then(|&ai| op.operand(ai).ok()) else {
            continue;
        };
        // the bias the shift goes to: the op's own or its bias add's, or one the rewriter gives it
        let (owner, channels) = match float_bias(op, site.rule) {
            Some((owner, _, _, bias)) => (owner, Some(bias.len())),
            None if lacks_own_bias(op, site.rule) => (op, None),
            None => {
                without_bias += 1;
                continue;
            }
        };
        let (Some(input), Some(out_value)) = (key_of(x), op.result(0).ok().and_then(|r| key_of(r.into()))) else {
            continue;
        };
        sites.push(BiasSite {
            op,
            wave: waves.of(&input),
            input_params: plan.params_of(x).cloned(),
            x,
            input,
            out_value,
            channel_axis: bias_axis(owner, owner == op),
            channels,
            site,
        });
    }
    (sites, without_bias)
}

/// Measures, on the samples of `feed` (inputs of `program`, the prepared, calibrated `module`
/// compiled), the
/// output shift of every layer whose int8/int4 weight and bias `config` quantizes, with its
/// activation input quantized as `stats` say — and with `float_inputs_too`, once more with
/// that input float. Samples run on `threads` workers and their sums are added in sample
/// order: the shifts do not depend on the thread count.
pub fn measure_bias_shifts(
    module: &Module,
    program: &Program,
    stats: &StatsFile,
    config: &QuantConfig,
    feed: Feed,
    threads: usize,
    float_inputs_too: bool,
) -> Result<BiasCorrection, QuantizeError> {
    let failed = |m: String| QuantizeError::Stats(format!("bias correction: {m}"));
    let plan = plan(module, Some(stats), config)?;
    let func = find_function(module, None)?;
    let folded: HashMap<&str, &Tensor> = program.constant_values().collect();
    let (sites, without_bias) = bias_sites(func, &plan, config);
    drop(plan);
    let mut layers: Vec<Layer> = Vec::new();
    for s in sites {
        let site = s.site;
        let (p, _) = weight_params(&site.values, site.axis, &site.res).map_err(|e| failed(e.to_string()))?;
        // the weights as the rewriter will round them: by GPTQ where it measured the layer
        let rounded = config
            .weight_grams
            .get(&site.out_key)
            .and_then(|gram| gptq_rounded(s.op, &site.values, &p, gram).ok());
        let values = rounded.as_ref().unwrap_or(&site.values);
        let wq = fake_quant(&values.view(), &p, Rounding::HalfEven).map_err(|e| failed(e.to_string()))?;
        let Some(quantized) = LocalOp::new(s.op, s.x, func, &folded, &[(site.index, Tensor::F32(wq))]) else {
            continue;
        };
        let mut keys = vec![s.input.clone(), s.out_value.clone()];
        keys.extend(quantized.runtime_keys().map(str::to_string));
        keys.sort();
        keys.dedup();
        layers.push(Layer {
            out_key: site.out_key,
            out_value: s.out_value,
            input: s.input,
            float_too: float_inputs_too && s.input_params.is_some(),
            input_params: s.input_params,
            quantized,
            channel_axis: s.channel_axis,
            channels: s.channels,
            keys,
        });
    }
    // what each sample's values are kept for: the layers that read them, and how many
    let mut uses: HashMap<String, usize> = HashMap::new();
    let mut ready: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, l) in layers.iter().enumerate() {
        for k in &l.keys {
            *uses.entry(k.clone()).or_default() += 1;
        }
        ready.entry(l.out_value.clone()).or_default().push(i);
    }
    let mut keys: Vec<String> = uses.keys().cloned().collect();
    keys.sort();
    let watch = program.watch(&keys).map_err(|e| failed(e.to_string()))?;
    let init = || Sample {
        seen: HashMap::new(),
        left: uses.clone(),
        sums: vec![None; layers.len()],
    };
    // a layer is measured when its float output arrives: its input came before it
    let fold = |s: &mut Sample, _: usize, key: &str, t: &Tensor| -> Result<(), String> {
        let measured = ready.get(key).map_or(&[][..], |v| v.as_slice());
        // a layer's output read by nothing else is measured where it arrives, not copied
        if s.left.get(key) != Some(&measured.len()) || measured.is_empty() {
            s.seen.insert(key.to_string(), t.clone());
        }
        for &i in measured {
            let l = &layers[i];
            s.sums[i] = measure(l, t, &s.seen).map_err(|e| format!("{}: {e}", l.out_key))?;
            for k in &l.keys {
                if let Some(n) = s.left.get_mut(k) {
                    *n -= 1;
                    if *n == 0 {
                        s.seen.remove(k);
                    }
                }
            }
        }
        Ok(())
    };
    let mut totals: Vec<Sums> = vec![Sums::default(); layers.len()];
    let mut combine = |_: usize, s: Sample| -> Result<(), String> {
        for (t, x) in totals.iter_mut().zip(&s.sums) {
            if let Some(x) = x {
                t.add(x);
            }
        }
        Ok(())
    };
    let n = run_samples_fold(
        program,
        feed,
        threads,
        &watch,
        &init,
        &fold,
        &mut combine,
        "bias correction",
    )
    .map_err(|e| failed(e.to_string()))?;
    let mut out = BiasCorrection {
        without_bias,
        samples: n,
        ..Default::default()
    };
    for (l, t) in layers.into_iter().zip(totals) {
        out.add_layer(l.out_key, &t, l.float_too);
    }
    Ok(out)
}

/// One sample's sums of layer `l`, from its float output `y` and its float input in `seen`;
/// `None` when they are not f32 or the op did not run.
fn measure(l: &Layer, y: &Tensor, seen: &HashMap<String, Tensor>) -> Result<Option<Sums>, String> {
    let (Some(xt @ Tensor::F32(x)), Tensor::F32(y)) = (seen.get(&l.input), y) else {
        return Ok(None);
    };
    // the float input is read where it is, not copied
    let rounded;
    let xq = match &l.input_params {
        Some(p) => {
            rounded = Tensor::F32(fake_quant(&x.view(), p, Rounding::HalfEven).map_err(|e| e.to_string())?);
            &rounded
        }
        None => xt,
    };
    let Some(yq) = l.quantized.run(xq, seen)? else {
        return Ok(None);
    };
    let yw = match l.float_too {
        true => match l.quantized.run(xt, seen)? {
            Some(t) if t.shape() == y.shape() => Some(t),
            _ => return Ok(None),
        },
        false => None,
    };
    channel_sums((l.channel_axis, l.channels), y, &yq, yw.as_ref()).map(Some)
}

/// One sample's sums of a layer whose bias runs along `axis` of its output and is `channels`
/// long (`None`: as many as the output has there), from its float output `y`, its output
/// `yq` as quantized and, where measured, `yw` with only its weights quantized.
fn channel_sums(
    (axis, channels): (ChannelAxis, Option<usize>),
    y: &ArrayD<f32>,
    yq: &ArrayD<f32>,
    yw: Option<&ArrayD<f32>>,
) -> Result<Sums, String> {
    let axis = match axis {
        ChannelAxis::Second => 1,
        ChannelAxis::Last => y.ndim().saturating_sub(1),
    };
    let channels = channels.unwrap_or(if axis < y.ndim() { y.shape()[axis] } else { 0 });
    if yq.shape() != y.shape() || axis >= y.ndim() || y.shape()[axis] != channels || channels == 0 {
        return Err(format!(
            "outputs of shape {:?} and {:?} for a bias of {} channels",
            y.shape(),
            yq.shape(),
            channels
        ));
    }
    let mut s = Sums {
        diff: vec![0.0; channels],
        diff_float: vec![0.0; if yw.is_some() { channels } else { 0 }],
        count: (y.len() / channels) as u64,
        ..Default::default()
    };
    for c in 0..channels {
        let (yf, yq) = (y.index_axis(Axis(axis), c), yq.index_axis(Axis(axis), c));
        let mut d = 0f64;
        for (a, b) in yf.iter().zip(yq.iter()) {
            let a = *a as f64;
            d += *b as f64 - a;
            s.sum += a;
            s.sum_sq += a * a;
        }
        s.diff[c] = d;
        if let Some(w) = yw {
            s.diff_float[c] = w
                .index_axis(Axis(axis), c)
                .iter()
                .zip(y.index_axis(Axis(axis), c).iter())
                .map(|(b, a)| *b as f64 - *a as f64)
                .sum();
        }
    }
    Ok(s)
}
