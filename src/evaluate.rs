//! `evaluate`: float model against quantized model on held-out data — per output SQNR, top-1
//! agreement and accuracy against labels, and per layer the SQNR of every tensor both models
//! compute, worst first, so that a user sees where accuracy was lost.

use crate::formats::data::{bind, Dataset};
use crate::interp::Program;
use crate::quantize::prepare;
use crate::run::{picked_among, picked_samples, run_samples, run_side_by_side, Feed, RunError, SideBySide};
use crate::tensor::Tensor;
use melior::ir::Module;
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};

#[derive(Debug, Clone, Default)]
pub struct EvalOptions {
    pub threads: usize,
    pub limit: Option<usize>,
    /// The `limit` samples spread over the data (`run::picked_samples`) instead of the first
    /// ones (a data set in order — by recording, by class — has its first samples alike).
    pub spread: bool,
    /// With `spread`: the `limit` samples spread over this many spread over the data
    /// (`run::picked_among`) rather than over all of them.
    pub among: Option<usize>,
    /// Name of an integer array of class labels in the data.
    pub labels: Option<String>,
    pub per_layer: bool,
    /// Histogram every quantized activation of the float model (for the HTML report).
    pub histograms: bool,
    pub overrides: Vec<(String, String)>,
    /// How the quantized model's int8 ops compute: exactly, or as onnxruntime's x86 int8
    /// kernels without VNNI do (`interp::ort_x86`).
    pub numerics: crate::interp::ort_x86::Numerics,
}

impl EvalOptions {
    /// The samples these options pick out of `samples`: the first `limit`, or `limit` spread
    /// over the data, or spread among `among` spread ones.
    pub fn picked(&self, samples: usize) -> Vec<usize> {
        match (self.spread, self.among, self.limit) {
            (true, Some(among), Some(limit)) => picked_among(samples, among, limit),
            _ => picked_samples(samples, self.limit, self.spread),
        }
    }
}

/// An SQNR this many dB below the previous layer's (one bit's worth) marks a sharp drop.
pub const SHARP_DROP_DB: f64 = 6.02;

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error(transparent)]
    Ir(#[from] crate::ir::IrError),
    #[error(transparent)]
    Pass(#[from] crate::passes::PassError),
    #[error(transparent)]
    Interp(#[from] crate::interp::InterpError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Data(#[from] crate::formats::data::DataError),
    /// The quantized model is not the float model's quantized form (said of the quantized
    /// model; the caller puts its name in front).
    #[error("{0}")]
    Mismatch(String),
}

/// Signal and noise energy of one tensor, summed over samples.
#[derive(Debug, Clone, Default)]
struct Energy {
    signal: f64,
    noise: f64,
    max_abs: f64,
    /// Σ f·q and Σ q², for the cosine similarity.
    dot: f64,
    quant: f64,
}

impl Energy {
    fn add(&mut self, f: &Tensor, q: &Tensor) {
        if let (Tensor::F32(a), Tensor::F32(b)) = (f, q) {
            for (x, y) in a.iter().zip(b) {
                let (x, d) = (*x as f64, (*x - *y) as f64);
                self.signal += x * x;
                self.noise += d * d;
                self.dot += x * *y as f64;
                self.quant += (*y as f64) * (*y as f64);
                self.max_abs = self.max_abs.max(d.abs());
            }
        }
    }
    /// Adds another sample's sums.
    fn merge(&mut self, o: &Energy) {
        self.signal += o.signal;
        self.noise += o.noise;
        self.dot += o.dot;
        self.quant += o.quant;
        self.max_abs = self.max_abs.max(o.max_abs);
    }
    /// 10·log10(signal / noise) in dB; `None` when the quantized values are exact.
    fn sqnr_db(&self) -> Option<f64> {
        (self.noise > 0.0).then(|| 10.0 * (self.signal.max(f64::MIN_POSITIVE) / self.noise).log10())
    }
    fn cosine(&self) -> Option<f64> {
        let n = (self.signal * self.quant).sqrt();
        (n > 0.0).then(|| self.dot / n)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct OutputReport {
    pub name: String,
    /// dB; null when exact.
    pub sqnr_db: Option<f64>,
    pub cosine: Option<f64>,
    pub max_abs_error: f64,
    pub top1_agreement: Option<f64>,
    pub float_accuracy: Option<f64>,
    pub quantized_accuracy: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LayerReport {
    pub key: String,
    #[serde(rename = "op")]
    pub producer: String,
    pub sqnr_db: Option<f64>,
    pub max_abs_error: f64,
    /// Position in program order.
    pub order: usize,
    /// The first layer (program order) whose SQNR falls [`SHARP_DROP_DB`] below the layer
    /// before it.
    pub sharp_drop: bool,
    /// What a compute op runs at in the quantized model ("int8 weights, int16 activations",
    /// "float", ...; [`crate::precision`]); `None` for other ops.
    pub precision: Option<String>,
    /// Why `quantize --target-sqnr` raised this value above int8 (or left its op float), as
    /// the quantized model records it; `None` for the rest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raised: Option<String>,
}

/// The float model's values at one quantized activation and the range its quantized type
/// represents.
#[derive(Debug, Clone, Serialize)]
pub struct ActivationHistogram {
    pub key: String,
    /// Representable range of the quantized type: scale · (qmin − zp) .. scale · (qmax − zp).
    pub range: (f64, f64),
    /// Bin edges (counts.len() + 1) and counts.
    pub edges: Vec<f64>,
    pub counts: Vec<u64>,
    /// Share of values outside the range (clipped by the quantized model).
    pub clipped: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    pub samples: usize,
    /// The first output's figures, at the top level for scripts.
    pub sqnr_db: Option<f64>,
    pub cosine: Option<f64>,
    pub max_abs_err: f64,
    pub top1_float: Option<f64>,
    pub top1_quant: Option<f64>,
    pub top1_agreement: Option<f64>,
    pub outputs: Vec<OutputReport>,
    /// Worst SQNR first.
    #[serde(rename = "per_layer")]
    pub layers: Vec<LayerReport>,
    /// Key of the first layer with a sharp SQNR drop, if any.
    pub first_sharp_drop: Option<String>,
    /// With `histograms`: one per quantized activation, in program order (not in the JSON).
    #[serde(skip)]
    pub histograms: Vec<ActivationHistogram>,
    /// With onnxruntime's x86 numerics: every op run in its u8s8 GEMM, in program order, with
    /// the int16 pair sums it formed and how many saturated; absent with exact numerics.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub simulated_onnxruntime_x86: Option<Vec<crate::interp::ort_x86::SimulatedOp>>,
}

impl EvalReport {
    /// Each output's SQNR in dB, an exact output (and any above 100 dB) as 100 dB: the figures
    /// `--choose-method` averages and a target takes the worst of.
    pub fn output_sqnrs_db(&self) -> impl Iterator<Item = f64> + '_ {
        self.outputs.iter().map(|o| o.sqnr_db.unwrap_or(100.0).min(100.0))
    }
}

/// Sorts `layers` into program order and marks the first whose SQNR lies more than
/// [`SHARP_DROP_DB`] below the previous layer with a finite SQNR (exact layers are skipped);
/// returns its key.
pub fn mark_first_sharp_drop(layers: &mut [LayerReport]) -> Option<String> {
    layers.sort_by_key(|l| l.order);
    let mut prev: Option<f64> = None;
    for l in layers.iter_mut() {
        let Some(v) = l.sqnr_db else { continue };
        if prev.is_some_and(|p| v < p - SHARP_DROP_DB) {
            l.sharp_drop = true;
            return Some(l.key.clone());
        }
        prev = Some(v);
    }
    None
}

/// The activations a quantized module quantizes: (float tensor key, representable range).
fn quantized_ranges(quant: &Module) -> Result<Vec<(String, (f64, f64))>, EvalError> {
    use crate::ir::graph::{body_ops, find_function, op_name};
    use melior::ir::operation::OperationLike;
    use melior::ir::ValueLike;
    let func = find_function(quant, None)?;
    let keys = crate::ir::keys::TensorKeys::new(func);
    let mut out = Vec::new();
    for op in body_ops(func) {
        if op_name(&op) != "quant.qcast" {
            continue;
        }
        let (Ok(x), Ok(r)) = (op.operand(0), op.result(0)) else {
            continue;
        };
        let Some(key) = keys.get(x) else { continue };
        use melior::ir::r#type::ShapedTypeLike;
        let Ok(shaped) = melior::ir::r#type::RankedTensorType::try_from(r.r#type()) else {
            continue;
        };
        let Ok(p) = crate::ir::quant::params_from_type(shaped.element(), crate::params::Scheme::Mlir) else {
            continue;
        };
        if p.scale.len() != 1 || out.iter().any(|(k, _): &(String, _)| k == key) {
            continue;
        }
        let (s, z) = (p.scale[0], p.zero_point[0] as f64);
        out.push((key.to_string(), (s * (p.qmin as f64 - z), s * (p.qmax as f64 - z))));
    }
    Ok(out)
}

/// The quantized model's value of a layer laid out as the float model's: as it is when the
/// shapes agree, transposed back when it is the NCHW form of an NHWC tensor (a TF model
/// written as ONNX), and `None` when the two are not the same tensor.
fn aligned<'t>(f: &Tensor, q: &'t Tensor) -> Option<std::borrow::Cow<'t, Tensor>> {
    let (fs, qs) = (f.shape(), q.shape());
    if fs == qs {
        return Some(std::borrow::Cow::Borrowed(q));
    }
    let nchw = fs.len() == 4 && [fs[0], fs[3], fs[1], fs[2]] == qs;
    nchw.then(|| crate::interp::kernels::layout::transpose(q, &[0, 2, 3, 1]).ok())
        .flatten()
        .map(std::borrow::Cow::Owned)
}

fn argmax(t: &Tensor) -> Option<usize> {
    let a = t.as_f32()?;
    a.iter()
        .enumerate()
        .fold(None, |b: Option<(usize, f32)>, (i, &v)| match b {
            Some((_, bv)) if bv >= v => b,
            _ => Some((i, v)),
        })
        .map(|x| x.0)
}

/// The integer class labels `opts.labels` names in `data`, if it names any.
fn load_labels(data: &Dataset, opts: &EvalOptions) -> Result<Option<Vec<i64>>, EvalError> {
    let Some(name) = &opts.labels else { return Ok(None) };
    let t = data
        .load(name)
        .ok_or_else(|| EvalError::Mismatch(format!("{}: no labels array '{name}'", data.path.display())))??;
    Ok(Some(crate::interp::kernels::ints_of(&t).ok_or_else(|| {
        EvalError::Mismatch(format!(
            "{}: labels '{name}' are {}, expected integers",
            data.path.display(),
            t.dtype()
        ))
    })?))
}

/// The outputs' sums over the samples of an evaluation, in sample order: each output's
/// energies, and top-1 of the first output — agreement, and accuracy against labels.
struct OutputTally {
    energies: Vec<Energy>,
    agree: usize,
    fcorrect: usize,
    qcorrect: usize,
}

impl OutputTally {
    fn new(outputs: usize) -> Self {
        OutputTally {
            energies: vec![Energy::default(); outputs],
            agree: 0,
            fcorrect: 0,
            qcorrect: 0,
        }
    }
    /// Sample `i`'s float outputs `f` and quantized outputs `q`.
    fn add(&mut self, i: usize, f: &[Tensor], q: &[Tensor], labels: Option<&[i64]>) {
        for (j, (a, b)) in f.iter().zip(q).enumerate() {
            self.energies[j].add(a, b);
        }
        let (af, aq) = (f.first().and_then(argmax), q.first().and_then(argmax));
        self.agree += (af == aq) as usize;
        if let Some(l) = labels.and_then(|l| l.get(i)) {
            self.fcorrect += (af.map(|a| a as i64) == Some(*l)) as usize;
            self.qcorrect += (aq.map(|a| a as i64) == Some(*l)) as usize;
        }
    }
    /// One report per output named in `names`, over `n` samples.
    fn reports(&self, names: &[String], n: usize, labelled: bool) -> Vec<OutputReport> {
        let frac = |k: usize| (n > 0).then(|| k as f64 / n as f64);
        names
            .iter()
            .zip(&self.energies)
            .enumerate()
            .map(|(j, (name, e))| OutputReport {
                name: name.clone(),
                sqnr_db: e.sqnr_db(),
                cosine: e.cosine(),
                max_abs_error: e.max_abs,
                top1_agreement: (j == 0).then(|| frac(self.agree)).flatten(),
                float_accuracy: (j == 0 && labelled).then(|| frac(self.fcorrect)).flatten(),
                quantized_accuracy: (j == 0 && labelled).then(|| frac(self.qcorrect)).flatten(),
            })
            .collect()
    }
}

/// Types the results a dynamic-dim `float` model left untyped at the input shapes of `data`'s
/// first sample, as calibration did; returns those shapes (`None` without samples).
fn typed_at_first_sample(
    float: &Module,
    data: &Dataset,
    opts: &EvalOptions,
) -> Result<Option<Vec<Vec<usize>>>, EvalError> {
    let specs = Program::compile_for_shapes(float)?.inputs;
    let first = bind(data, &specs, &opts.overrides)?;
    Ok(crate::quantize::resolve_types_from(float, &first)?.map(|t| t.shapes))
}

/// The quantized model's binding of `data`: the float model's samples must fit it too, or it
/// is not that model's quantized form.
fn bind_quantized(
    data: &Dataset,
    pq: &Program,
    opts: &EvalOptions,
) -> Result<crate::formats::data::Binding, EvalError> {
    bind(data, &pq.inputs, &opts.overrides).map_err(|e| {
        EvalError::Mismatch(format!(
            "does not take the float model's inputs, so it is not its quantized form: {e}"
        ))
    })
}

/// Evaluates `quant` against `float` on `data` (both modules are prepared in place; the
/// quantized one keeps the keys it was quantized with).
pub fn evaluate(float: &Module, quant: &Module, data: &Dataset, opts: &EvalOptions) -> Result<EvalReport, EvalError> {
    // untyped results (dynamic dims the importer could not resolve) take the data's shapes,
    // as they did in calibration
    if crate::quantize::untyped_results(float) + crate::quantize::untyped_results(quant) > 0 {
        if let Some(shapes) = typed_at_first_sample(float, data, opts)? {
            crate::quantize::resolve_types(quant, &shapes);
        }
    }
    prepare(float)?;
    let pf = Program::compile(float, None)?;
    let pq = Program::compile_with(quant, None, opts.numerics)?;
    if pf.inputs.len() != pq.inputs.len() || pf.output_names.len() != pq.output_names.len() {
        return Err(EvalError::Mismatch(format!(
            "has {} inputs and {} outputs, the float model {} and {}: not its quantized form",
            pq.inputs.len(),
            pq.output_names.len(),
            pf.inputs.len(),
            pf.output_names.len()
        )));
    }
    let binding = bind(data, &pf.inputs, &opts.overrides)?;
    bind_quantized(data, &pq, opts)?;
    let labels = load_labels(data, opts)?;
    // layers both models compute
    let layer_keys: Vec<String> = if opts.per_layer {
        let qkeys: HashSet<&str> = pq.values.iter().map(|v| v.key.as_str()).collect();
        pf.values
            .iter()
            .filter(|v| {
                !v.constant
                    && v.dtype == Some(crate::tensor::DType::F32)
                    && v.producer != "argument"
                    && qkeys.contains(v.key.as_str())
            })
            .map(|v| v.key.clone())
            .collect()
    } else {
        Vec::new()
    };
    let producers: BTreeMap<String, String> = pf.values.iter().map(|v| (v.key.clone(), v.producer.clone())).collect();
    let order: BTreeMap<&str, usize> = pf.values.iter().enumerate().map(|(i, v)| (v.key.as_str(), i)).collect();
    // quantized activations whose float values get a histogram
    let ranges: Vec<(String, (f64, f64))> = if opts.histograms {
        let fkeys: HashSet<&str> = pf.values.iter().map(|v| v.key.as_str()).collect();
        quantized_ranges(quant)?
            .into_iter()
            .filter(|(k, _)| fkeys.contains(k.as_str()))
            .collect()
    } else {
        Vec::new()
    };
    let mut hists: BTreeMap<String, (crate::calibration::Histogram, u64)> = ranges
        .iter()
        .map(|(k, _)| (k.clone(), (crate::calibration::Histogram::new(128), 0)))
        .collect();
    let range_of: BTreeMap<&str, (f64, f64)> = ranges.iter().map(|(k, r)| (k.as_str(), *r)).collect();
    let mut float_keys = layer_keys.clone();
    float_keys.extend(
        ranges
            .iter()
            .map(|(k, _)| k.clone())
            .filter(|k| !layer_keys.contains(k)),
    );
    let (wf, wq) = (pf.watch(&float_keys)?, pq.watch(&layer_keys)?);
    let paired: HashSet<String> = layer_keys.iter().cloned().collect();
    let indices = opts.picked(binding.samples);
    let n = indices.len();
    let mut tally = OutputTally::new(pf.output_names.len());
    let mut layers: BTreeMap<String, Energy> = BTreeMap::new();
    // the two models run side by side, each layer compared as soon as the quantized model
    // computes it: memory holds a few float activations per sample in flight, not all of
    // them (`run_side_by_side`); each sample's sums and histograms are merged in sample order
    type SampleHists = BTreeMap<String, (crate::calibration::Histogram, u64)>;
    let observe_float = |h: &mut SampleHists, k: &str, v: &Tensor| {
        if let (Some(&(lo, hi)), Tensor::F32(a)) = (range_of.get(k), v) {
            if let Some(xs) = a.as_slice() {
                let (hist, clipped) = h
                    .entry(k.to_string())
                    .or_insert_with(|| (crate::calibration::Histogram::new(128), 0));
                hist.observe_slice(xs);
                *clipped += xs.iter().filter(|&&x| (x as f64) < lo || (x as f64) > hi).count() as u64;
            }
        }
        Ok(())
    };
    let compare = |e: &mut BTreeMap<String, Energy>, k: &str, f: &Tensor, q: &Tensor| {
        if let Some(q) = aligned(f, q) {
            e.entry(k.to_string()).or_default().add(f, &q);
        }
        Ok(())
    };
    let mut combine = |i: usize, [f, q]: [Vec<Tensor>; 2], h: SampleHists, e: BTreeMap<String, Energy>| {
        for (k, (sample, clipped)) in h {
            if let Some((hist, total)) = hists.get_mut(&k) {
                hist.merge(&sample).map_err(|e| RunError::Output(e.to_string()))?;
                *total += clipped;
            }
        }
        for (k, sample) in e {
            layers.entry(k).or_default().merge(&sample);
        }
        tally.add(i, &f, &q, labels.as_deref());
        Ok(())
    };
    run_side_by_side(
        [&pf, &pq],
        Feed::Indexed {
            data: &binding,
            indices: &indices,
        },
        opts.threads,
        [&wf, &wq],
        &paired,
        SideBySide {
            init: &|| (SampleHists::new(), BTreeMap::new()),
            observe_a: &observe_float,
            compare: &compare,
            combine: &mut combine,
        },
        "evaluate",
    )?;
    let outputs = tally.reports(&pf.output_names, n, labels.is_some());
    let precisions = match opts.per_layer {
        true => crate::precision::compute_precisions(quant)?,
        false => BTreeMap::new(),
    };
    let raised = match opts.per_layer {
        true => crate::precision::raised_marks(quant),
        false => BTreeMap::new(),
    };
    let mut layers: Vec<LayerReport> = layers
        .into_iter()
        .map(|(key, e)| LayerReport {
            precision: precisions.get(&key).cloned(),
            raised: raised.get(&key).cloned(),
            producer: producers.get(&key).cloned().unwrap_or_default(),
            sqnr_db: e.sqnr_db(),
            max_abs_error: e.max_abs,
            order: order.get(key.as_str()).copied().unwrap_or(usize::MAX),
            sharp_drop: false,
            key,
        })
        .collect();
    let first_sharp_drop = mark_first_sharp_drop(&mut layers);
    let histograms = ranges
        .iter()
        .filter_map(|(k, range)| {
            let (h, clipped) = hists.remove(k)?;
            (!h.is_empty()).then(|| ActivationHistogram {
                key: k.clone(),
                range: *range,
                edges: (0..=h.counts.len()).map(|i| h.edge(i)).collect(),
                clipped: clipped as f64 / h.count.max(1) as f64,
                counts: h.counts,
            })
        })
        .collect();
    layers.sort_by(|a, b| {
        a.sqnr_db
            .unwrap_or(f64::INFINITY)
            .total_cmp(&b.sqnr_db.unwrap_or(f64::INFINITY))
            .then(a.key.cmp(&b.key))
    });
    Ok(EvalReport {
        layers,
        first_sharp_drop,
        histograms,
        ..outputs_report(n, outputs, &pq, opts)
    })
}

/// A report of the outputs alone (no layers, no histograms): the first output's figures
/// repeated at the top, as `evaluate --json` has always printed them.
fn outputs_report(n: usize, outputs: Vec<OutputReport>, pq: &Program, opts: &EvalOptions) -> EvalReport {
    let first: Option<&OutputReport> = outputs.first();
    EvalReport {
        samples: n,
        sqnr_db: first.and_then(|o| o.sqnr_db),
        cosine: first.and_then(|o| o.cosine),
        max_abs_err: first.map_or(0.0, |o| o.max_abs_error),
        top1_float: first.and_then(|o| o.float_accuracy),
        top1_quant: first.and_then(|o| o.quantized_accuracy),
        top1_agreement: first.and_then(|o| o.top1_agreement),
        outputs,
        layers: Vec::new(),
        first_sharp_drop: None,
        histograms: Vec::new(),
        simulated_onnxruntime_x86: (opts.numerics != crate::interp::ort_x86::Numerics::Exact).then(|| pq.simulated()),
    }
}

/// Float outputs held at most, over all samples, by [`FloatOutputs`]: above it a search
/// evaluates side by side, running the float model each time.
pub const FLOAT_OUTPUTS_BUDGET: usize = 256 << 20;

/// The float model's outputs on the samples `opts` picks, computed once to score many
/// quantized forms of the model against ([`evaluate_outputs`]): a target's search scores
/// dozens, and ran the float model again for each.
pub struct FloatOutputs {
    /// How many samples the data hold (what options pick among).
    samples: usize,
    indices: Vec<usize>,
    names: Vec<String>,
    outputs: Vec<Vec<Tensor>>,
    /// The first sample's input shapes: a quantized model with results of unresolved type
    /// (dynamic dims) is typed at them, as [`evaluate`] types it.
    shapes: Option<Vec<Vec<usize>>>,
}

/// The float outputs [`evaluate_outputs`] compares against; `None` when they would take more
/// than [`FLOAT_OUTPUTS_BUDGET`] (then [`evaluate`] runs both models side by side).
pub fn float_outputs(float: &Module, data: &Dataset, opts: &EvalOptions) -> Result<Option<FloatOutputs>, EvalError> {
    let mut shapes = None;
    if crate::quantize::untyped_results(float) > 0 {
        shapes = typed_at_first_sample(float, data, opts)?;
    }
    prepare(float)?;
    let pf = Program::compile(float, None)?;
    let binding = bind(data, &pf.inputs, &opts.overrides)?;
    if shapes.is_none() {
        shapes = crate::quantize::first_sample_shapes(&binding)?;
    }
    let indices = opts.picked(binding.samples);
    let mut bytes = 0usize;
    let mut outputs = Vec::with_capacity(indices.len());
    for chunk in indices.chunks(16) {
        let got = outputs_of(&pf, &binding, chunk, opts.threads)?;
        bytes += got.iter().flatten().map(Tensor::size_bytes).sum::<usize>();
        if bytes > FLOAT_OUTPUTS_BUDGET {
            return Ok(None);
        }
        outputs.extend(got);
    }
    Ok(Some(FloatOutputs {
        samples: binding.samples,
        indices,
        names: pf.output_names.clone(),
        outputs,
        shapes,
    }))
}

/// The outputs of `program` on the samples `indices`, in their order.
fn outputs_of(
    program: &Program,
    binding: &crate::formats::data::Binding,
    indices: &[usize],
    threads: usize,
) -> Result<Vec<Vec<Tensor>>, EvalError> {
    let none = program.watch(&[])?;
    Ok(run_samples(
        program,
        binding,
        indices,
        threads,
        &none,
        true,
        &mut |_, _, _| Ok(()),
        "evaluate",
    )?)
}

/// [`evaluate`] of the outputs alone (no per-layer figures, no histograms), against float
/// outputs computed once: the same figures, bit for bit, with the quantized model run alone.
/// `opts` may pick fewer samples than `reference` was made with (a target's sensitivity
/// samples among its scoring ones), but none it does not hold.
pub fn evaluate_outputs(
    reference: &FloatOutputs,
    quant: &Module,
    data: &Dataset,
    opts: &EvalOptions,
) -> Result<EvalReport, EvalError> {
    if let Some(shapes) = &reference.shapes {
        if crate::quantize::untyped_results(quant) > 0 {
            crate::quantize::resolve_types(quant, shapes);
        }
    }
    let pq = Program::compile_with(quant, None, opts.numerics)?;
    if pq.output_names.len() != reference.names.len() {
        return Err(EvalError::Mismatch(format!(
            "has {} outputs, the float model {}: not its quantized form",
            pq.output_names.len(),
            reference.names.len()
        )));
    }
    let binding = bind_quantized(data, &pq, opts)?;
    let labels = load_labels(data, opts)?;
    let indices = opts.picked(reference.samples);
    let floats = indices
        .iter()
        .map(|i| match reference.indices.iter().position(|j| j == i) {
            Some(at) => Ok(&reference.outputs[at]),
            None => Err(EvalError::Mismatch(format!(
                "sample {i}: not among the {} samples the float outputs were kept for",
                reference.indices.len()
            ))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let quantized = outputs_of(&pq, &binding, &indices, opts.threads)?;
    let mut tally = OutputTally::new(reference.names.len());
    for ((&i, f), q) in indices.iter().zip(floats).zip(&quantized) {
        tally.add(i, f, q, labels.as_deref());
    }
    let n = indices.len();
    let outputs = tally.reports(&reference.names, n, labels.is_some());
    Ok(outputs_report(n, outputs, &pq, opts))
}

/// What the simulation of onnxruntime's x86 kernels saw: one line, and one per op whose pair
/// sums saturated (most saturated first).
fn write_simulated(f: &mut std::fmt::Formatter<'_>, ops: &[crate::interp::ort_x86::SimulatedOp]) -> std::fmt::Result {
    let share = |o: &crate::interp::ort_x86::SimulatedOp| o.saturated as f64 / o.pairs.max(1) as f64;
    let mut hit: Vec<_> = ops.iter().filter(|o| o.saturated > 0).collect();
    hit.sort_by(|a, b| share(b).total_cmp(&share(a)).then_with(|| a.key.cmp(&b.key)));
    let at_risk = ops.iter().filter(|o| o.channels_at_risk > 0).count();
    writeln!(
        f,
        "simulated onnxruntime on x86 without VNNI (int16 pair sums of its u8s8 GEMM): {} ops in that GEMM, {at_risk} with output channels whose weights could saturate on some uint8 input (beyond the calibrated ranges), {} saturated on these samples",
        ops.len(),
        hit.len()
    )?;
    for o in hit.iter().take(15) {
        writeln!(
            f,
            "  {:>8.3} % of pair sums saturated in {} channels of {}  {:<12} {}",
            share(o) * 100.0,
            o.channels_at_risk,
            o.channels,
            o.op,
            o.key
        )?;
    }
    if hit.len() > 15 {
        writeln!(f, "  ... {} more in --json", hit.len() - 15)?;
    }
    Ok(())
}

pub(crate) fn db(x: Option<f64>) -> String {
    x.map_or("exact".into(), |v| format!("{v:.2} dB"))
}
pub(crate) fn pct(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{:.2} %", v * 100.0))
}

impl std::fmt::Display for EvalReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{} samples", self.samples)?;
        for o in &self.outputs {
            writeln!(
                f,
                "output {}: SQNR {}, cosine {}, max |error| {:.4}, top-1 agreement {}",
                o.name,
                db(o.sqnr_db),
                o.cosine.map_or("-".into(), |c| format!("{c:.6}")),
                o.max_abs_error,
                pct(o.top1_agreement)
            )?;
            if o.float_accuracy.is_some() {
                writeln!(
                    f,
                    "  accuracy: float {}, quantized {}",
                    pct(o.float_accuracy),
                    pct(o.quantized_accuracy)
                )?;
            }
        }
        if let Some(ops) = &self.simulated_onnxruntime_x86 {
            write_simulated(f, ops)?;
        }
        if !self.layers.is_empty() {
            writeln!(f, "\nper layer, worst SQNR first:")?;
            for l in self.layers.iter().take(15) {
                let mark = if l.sharp_drop { "  ← first sharp drop" } else { "" };
                let at = l.precision.as_ref().map_or(String::new(), |p| format!("  [{p}]"));
                let raised = l.raised.as_ref().map_or(String::new(), |r| format!("  — {r}"));
                writeln!(
                    f,
                    "  {:>10}  {:<24} {}{at}{raised}{mark}",
                    db(l.sqnr_db),
                    l.producer,
                    l.key
                )?;
            }
            if self.layers.len() > 15 {
                writeln!(f, "  ... {} more in --json / --report", self.layers.len() - 15)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(key: &str, order: usize, sqnr_db: Option<f64>) -> LayerReport {
        LayerReport {
            key: key.into(),
            producer: "op".into(),
            sqnr_db,
            max_abs_error: 0.0,
            order,
            sharp_drop: false,
            precision: None,
            raised: None,
        }
    }

    #[test]
    fn first_sharp_drop_is_in_program_order_and_skips_exact_layers() {
        // given worst first, as the report lists them
        let mut v = vec![
            layer("d", 3, Some(20.0)),
            layer("f", 5, Some(10.0)),
            layer("c", 2, Some(40.0)),
            layer("a", 0, None),
            layer("b", 1, Some(45.0)),
            layer("e", 4, None),
        ];
        // b 45 → c 40 is a drop of 5 dB (< 6.02); c 40 → d 20 is the first sharp one; f is later
        assert_eq!(mark_first_sharp_drop(&mut v).as_deref(), Some("d"));
        let marked: Vec<&str> = v.iter().filter(|l| l.sharp_drop).map(|l| l.key.as_str()).collect();
        assert_eq!(marked, ["d"]);
        assert_eq!(v.iter().map(|l| l.order).collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5]);
        // exactly 6.02 dB below is not sharp; an exact layer between does not reset the reference
        let mut w = vec![
            layer("x", 0, Some(30.0)),
            layer("y", 1, None),
            layer("z", 2, Some(30.0 - SHARP_DROP_DB)),
        ];
        assert_eq!(mark_first_sharp_drop(&mut w), None);
        let mut u = vec![
            layer("x", 0, Some(30.0)),
            layer("y", 1, None),
            layer("z", 2, Some(23.0)),
        ];
        assert_eq!(mark_first_sharp_drop(&mut u).as_deref(), Some("z"));
    }
}
