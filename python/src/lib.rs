//! quantir's Python extension (`quantir._quantir`): converts Python arguments to the library's
//! job requests ([`quantir::jobs`]), runs them with the GIL released and converts the results
//! back. The public API, its validation and its error classes are in `quantir/__init__.py`.
//!
//! Errors are raised as the `quantir` error class named by their kind, with the command line's
//! one-line message; a Rust panic is caught here and raised as `quantir.QuantirError`, never as
//! a `PanicException`.

mod convert;

use convert::{arrays_from_dict, kind_of, tensor_to_numpy, PyItems, Raised};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use quantir::calibration::StatsFile;
use quantir::formats::data::Dataset;
use quantir::jobs::{self, CalibFlags, JobError, RecipeFlags, RecipeSource, Samples, StatsSource};
use std::path::PathBuf;

/// Tensors on cache lines, as in the command line (`quantir::alloc`).
#[global_allocator]
static GLOBAL: quantir::alloc::CacheAligned = quantir::alloc::CacheAligned;

/// Calibration statistics: what `quantir calibrate` writes, in memory.
#[pyclass(module = "quantir._quantir", frozen)]
struct Stats {
    inner: StatsFile,
}

#[pymethods]
impl Stats {
    /// Reads a statistics file (as `quantir calibrate -o` writes).
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<Stats> {
        let inner = py
            .detach(|| quantir::stats_io::load_stats(&path))
            .map_err(|e| raise(JobError::from(e)))?;
        Ok(Stats { inner })
    }

    /// Writes the statistics, atomically, byte for byte as `quantir calibrate -o` does.
    fn save(&self, path: PathBuf) -> PyResult<()> {
        quantir::stats_io::save_stats(&self.inner, &path, &[]).map_err(|e| raise(JobError::from(e)))
    }

    /// The statistics file's JSON text.
    fn to_json(&self) -> PyResult<String> {
        self.inner.to_json().map_err(|e| {
            raise(JobError::Calibrate(
                quantir::quantize::calibrate::CalibrateError::Calib(e),
            ))
        })
    }

    #[getter]
    fn num_samples(&self) -> u64 {
        self.inner.num_samples
    }

    /// The range method with its parameters, as the statistics file's summary line says it
    /// (`MinMax`, `Percentile { percentile: 99.999 }`, …).
    #[getter]
    fn method(&self) -> String {
        format!("{:?}", self.inner.method)
    }

    /// The keys of the observed tensors, sorted.
    #[getter]
    fn tensors(&self) -> Vec<String> {
        self.inner.tensors.keys().cloned().collect()
    }

    #[getter]
    fn model_hash(&self) -> String {
        self.inner.model_hash.clone()
    }

    fn __len__(&self) -> usize {
        self.inner.tensors.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "Stats({} tensors, {} samples, method {:?}, model {})",
            self.inner.tensors.len(),
            self.inner.num_samples,
            self.inner.method,
            self.inner.model_hash
        )
    }
}

/// A job's error as the Python exception of its kind (see `quantir/errors.py`).
fn raise(e: JobError) -> PyErr {
    let message = quantir::text::one_line(&e);
    Python::attach(|py| convert::exception(py, kind_of(&e), &message))
}

/// A panic's message.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown".into())
}

fn internal(py: Python<'_>, panic: &(dyn std::any::Any + Send)) -> PyErr {
    convert::exception(
        py,
        "QuantirError",
        &format!(
            "internal error (a bug in quantir, please report it): {}",
            panic_text(panic)
        ),
    )
}

/// Runs a whole Python call (conversions included) with a panic raised as `QuantirError`.
fn guard<T>(py: Python<'_>, call: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)).unwrap_or_else(|p| Err(internal(py, p.as_ref())))
}

/// Runs `work` with the GIL released, Ctrl-C and the `progress` callable checked after every
/// sample, and a panic turned into a `QuantirError`. An exception a Python callback
/// raised (the generator, the reader, `progress`, KeyboardInterrupt) is raised again as is.
fn detached<T: Send>(
    py: Python<'_>,
    progress: Option<Py<PyAny>>,
    raised: &Raised,
    work: impl FnOnce() -> Result<T, JobError> + Send,
) -> PyResult<T> {
    let slot = raised.clone();
    let tick = Box::new(move |done: usize, total: Option<usize>| -> Result<(), String> {
        Python::attach(|py| {
            let r = py.check_signals().and_then(|()| match &progress {
                Some(f) => f.call1(py, (done, total)).map(|_| ()),
                None => Ok(()),
            });
            r.map_err(|e| {
                let text = e.to_string();
                slot.keep(e);
                text
            })
        })
    });
    let result =
        py.detach(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| quantir::run::with_tick(tick, work))));
    match result {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(raised.take().unwrap_or_else(|| raise(e))),
        Err(panic) => Err(internal(py, panic.as_ref())),
    }
}

/// Calibration data as the library takes it: a path, a dict of arrays (first axis = samples),
/// or a stream of dicts (an iterator, or an onnxruntime `CalibrationDataReader`).
enum Calibration {
    Data(Dataset),
    Stream(PyItems),
}

impl Calibration {
    fn from_py(
        obj: &Bound<'_, PyAny>,
        images: &quantir::formats::images::ImageOptions,
        raised: &Raised,
    ) -> PyResult<Self> {
        if let Ok(path) = obj.extract::<PathBuf>() {
            let d = Dataset::open_with(&path, images).map_err(|e| raise(JobError::from(e)))?;
            return Ok(Calibration::Data(d));
        }
        if let Ok(dict) = obj.cast::<PyDict>() {
            let arrays = arrays_from_dict(dict, "calibration arrays")?;
            let d = Dataset::from_arrays("calibration arrays", arrays).map_err(|e| raise(JobError::from(e)))?;
            return Ok(Calibration::Data(d));
        }
        Ok(Calibration::Stream(PyItems::new(obj, raised.clone())?))
    }

    fn samples(&mut self) -> Samples<'_> {
        match self {
            Calibration::Data(d) => Samples::Data(d),
            Calibration::Stream(s) => Samples::Stream(s),
        }
    }
}

/// The calibration keywords, as `quantir/__init__.py` validated them.
#[derive(FromPyObject)]
struct CalibArgs {
    method: Option<String>,
    percentile: Option<f64>,
    bins: usize,
    shard: Option<(usize, usize)>,
    skip_non_finite: bool,
    threads: usize,
    limit: Option<usize>,
    inputs: Vec<(String, String)>,
    image_size: Option<(usize, usize)>,
    mean: Vec<f32>,
    std: Vec<f32>,
    layout: String,
}

impl CalibArgs {
    fn flags(&self) -> CalibFlags {
        CalibFlags {
            method: self.method.clone(),
            percentile: self.percentile,
            bins: self.bins,
            shard: self.shard,
            skip_non_finite: self.skip_non_finite,
            threads: self.threads,
            limit: self.limit,
            overrides: self.inputs.clone(),
        }
    }

    fn images(&self) -> PyResult<quantir::formats::images::ImageOptions> {
        Ok(quantir::formats::images::ImageOptions {
            size: self.image_size,
            mean: self.mean.clone(),
            std: self.std.clone(),
            layout: self.layout.parse().map_err(PyValueError::new_err)?,
            limit: self.limit,
        })
    }
}

/// The recipe keywords, as `quantir/__init__.py` validated them; `config` is a recipe file's
/// path or a dict (passed as JSON text, read as the TOML it mirrors).
#[derive(FromPyObject)]
struct RecipeArgs {
    config_path: Option<PathBuf>,
    config_json: Option<String>,
    scheme: Option<String>,
    weights: Option<String>,
    activations: Option<String>,
    per_channel: bool,
    symmetric_activations: bool,
    quantize_outputs: bool,
    reduce_range: bool,
    runtime: Option<String>,
    exclude: Vec<String>,
    target_sqnr: Option<f64>,
    target_top1: Option<f64>,
    labels: Option<String>,
}

impl RecipeArgs {
    fn flags(&self) -> PyResult<RecipeFlags> {
        let text = match &self.config_json {
            None => None,
            Some(j) => {
                let bad = |e: String| convert::exception_now("ConfigError", &format!("config: {e}"));
                let v: serde_json::Value = serde_json::from_str(j).map_err(|e| bad(e.to_string()))?;
                Some(toml::to_string(&v).map_err(|e| bad(e.to_string()))?)
            }
        };
        Ok(RecipeFlags {
            recipe: match (&self.config_path, text) {
                (Some(p), _) => Some(RecipeSource::File(p.clone())),
                (None, Some(t)) => Some(RecipeSource::Text(t)),
                (None, None) => None,
            },
            scheme: self.scheme.clone(),
            weights: self.weights.clone(),
            activations: self.activations.clone(),
            per_tensor: !self.per_channel,
            symmetric_activations: self.symmetric_activations,
            quantize_outputs: self.quantize_outputs,
            reduce_range: self.reduce_range,
            runtime: self.runtime.clone(),
            exclude: self.exclude.clone(),
            target: quantir::target::Goal::from_options(self.target_sqnr, self.target_top1, self.labels.clone()),
            bias_correction: None,
            bias_correction_sequential: None,
            gptq: None,
            gptq_asymmetric: None,
            per_channel_depthwise_inputs: None,
            float_read_outputs: false,
            qlinear_outputs: false,
            activation_matmuls: None,
            equalize_layers: None,
            equalize_by: None,
        })
    }
}

/// `quantir.calibrate`: statistics of `model` on `calibration`.
#[pyfunction]
#[pyo3(signature = (model, calibration, calib, signature=None, onnx=false, progress=None))]
fn calibrate(
    py: Python<'_>,
    model: PathBuf,
    calibration: &Bound<'_, PyAny>,
    calib: CalibArgs,
    signature: Option<String>,
    onnx: bool,
    progress: Option<Py<PyAny>>,
) -> PyResult<(Stats, Vec<String>)> {
    guard(py, || {
        let raised = Raised::default();
        let mut data = Calibration::from_py(calibration, &calib.images()?, &raised)?;
        let flags = calib.flags();
        let (stats, lines) = detached(py, progress, &raised, move || {
            let mut lines = Vec::new();
            let ctx = quantir::ir::new_context();
            let module = jobs::load(&ctx, &model, signature.as_deref())?;
            if onnx {
                lines.extend(jobs::lower_to_onnx(&module, &model)?);
            }
            let config = quantir::quantize::QuantConfig::default();
            let opts = jobs::calibrate_options(&flags, &config, None)?;
            let t = std::time::Instant::now();
            let c = jobs::calibrate(&module, data.samples(), &flags, &opts, None).map_err(|e| e.within(&model))?;
            lines.extend(c.type_warning.iter().map(|w| format!("warning: {w}")));
            lines.push(jobs::calibrated_line(&c, t.elapsed().as_secs_f64()));
            Ok((c.stats, lines))
        })?;
        Ok((Stats { inner: stats }, lines))
    })
}

/// `quantir.quantize`: the quantize job; returns the `quantize --json` document (as JSON text)
/// and the lines the command line prints on the way.
#[pyfunction]
#[pyo3(signature = (model, output, recipe, calib, calibration=None, validation=None, stats=None, stats_path=None, candidates=None, per_point=false, signature=None, cache=false, progress=None))]
#[allow(clippy::too_many_arguments)]
fn quantize(
    py: Python<'_>,
    model: PathBuf,
    output: PathBuf,
    recipe: RecipeArgs,
    calib: CalibArgs,
    calibration: Option<&Bound<'_, PyAny>>,
    validation: Option<&Bound<'_, PyAny>>,
    stats: Option<PyRef<'_, Stats>>,
    stats_path: Option<PathBuf>,
    candidates: Option<Vec<String>>,
    per_point: bool,
    signature: Option<String>,
    cache: bool,
    progress: Option<Py<PyAny>>,
) -> PyResult<(String, Vec<String>)> {
    guard(py, || {
        let raised = Raised::default();
        let mut data = calibration
            .map(|c| Calibration::from_py(c, &calib.images()?, &raised))
            .transpose()?;
        // read again for each scoring: a path or arrays, not a stream
        let validation =
            match validation
                .map(|v| Calibration::from_py(v, &calib.images()?, &raised))
                .transpose()?
            {
                Some(Calibration::Data(d)) => Some(d),
                Some(Calibration::Stream(_)) => return Err(raise(JobError::Usage(
                    "validation: expected a path or a dict of arrays (data read again for each score), not a stream"
                        .into(),
                ))),
                None => None,
            };
        let given = stats.map(|s| s.inner.clone());
        let flags = calib.flags();
        let rflags = recipe.flags()?;
        detached(py, progress, &raised, move || {
            let mut lines = Vec::new();
            let source = match (&stats_path, &given, data.as_mut()) {
                (Some(p), _, _) => StatsSource::File(p),
                (None, Some(s), _) => StatsSource::Given(s),
                (None, None, Some(d)) => StatsSource::Calibrate {
                    samples: d.samples(),
                    flags: &flags,
                    cache: if cache {
                        quantir::quantize::cache::default_dir()
                    } else {
                        None
                    },
                    choose: candidates.as_deref().map(|c| match per_point {
                        true => quantir::jobs::Choose::Range(c),
                        false => quantir::jobs::Choose::Method(c),
                    }),
                },
                (None, None, None) => StatsSource::None,
            };
            let done = jobs::quantize(
                &model,
                signature.as_deref(),
                &output,
                &rflags,
                source,
                validation.as_ref(),
                &mut |l| lines.push(l),
            )?;
            let doc = jobs::quantize_summary(&output, &done);
            let text = serde_json::to_string(&doc).map_err(|e| JobError::Usage(e.to_string()))?;
            lines.push(done.report.to_string());
            Ok((text, lines))
        })
    })
}

/// `quantir.evaluate`: the `evaluate --json` document as JSON text.
#[pyfunction]
#[pyo3(signature = (float_model, quant_model, data, calib, labels=None, per_layer=false, report=None, signature=None, runtime=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn evaluate(
    py: Python<'_>,
    float_model: PathBuf,
    quant_model: PathBuf,
    data: &Bound<'_, PyAny>,
    calib: CalibArgs,
    labels: Option<String>,
    per_layer: bool,
    report: Option<PathBuf>,
    signature: Option<String>,
    runtime: Option<String>,
    progress: Option<Py<PyAny>>,
) -> PyResult<String> {
    guard(py, || {
        let raised = Raised::default();
        let numerics = match runtime.as_deref() {
            None => Default::default(),
            Some(r) => quantir::interp::ort_x86::Numerics::of_runtime(
                r.parse()
                    .map_err(|e: String| PyValueError::new_err(format!("runtime: {e}")))?,
            ),
        };
        let dataset = match Calibration::from_py(data, &calib.images()?, &raised)? {
            Calibration::Data(d) => d,
            Calibration::Stream(_) => {
                return Err(PyValueError::new_err(
                    "evaluate runs both models on the same samples: pass a path or a dict of arrays, not a stream",
                ))
            }
        };
        let opts = quantir::evaluate::EvalOptions {
            threads: calib.threads,
            limit: calib.limit,
            labels,
            per_layer: per_layer || report.is_some(),
            histograms: report.is_some(),
            overrides: calib.inputs.clone(),
            numerics,
            ..Default::default()
        };
        detached(py, progress, &raised, move || {
            let ctx = quantir::ir::new_context();
            let float = jobs::load(&ctx, &float_model, signature.as_deref())?;
            let quant = jobs::load(&ctx, &quant_model, signature.as_deref())?;
            let r = quantir::evaluate::evaluate(&float, &quant, &dataset, &opts)?;
            if let Some(path) = &report {
                let page = quantir::report::html(&r, &quant_model.display().to_string());
                quantir::fsutil::write_atomic(path, page.as_bytes(), &[&float_model, &quant_model, &dataset.path])?;
            }
            serde_json::to_string(&r).map_err(|e| JobError::Usage(e.to_string()))
        })
    })
}

/// `quantir.run`: one run of the model on `inputs` (name → array, each the input's whole
/// tensor); the outputs by name, handed to NumPy without a copy.
#[pyfunction]
#[pyo3(signature = (model, inputs, function=None, signature=None))]
fn run<'py>(
    py: Python<'py>,
    model: PathBuf,
    inputs: &Bound<'py, PyDict>,
    function: Option<String>,
    signature: Option<String>,
) -> PyResult<Bound<'py, PyDict>> {
    guard(py, || {
        let raised = Raised::default();
        let arrays = arrays_from_dict(inputs, "inputs")?;
        let outs = detached(py, None, &raised, move || {
            let ctx = quantir::ir::new_context();
            let module = jobs::load(&ctx, &model, signature.as_deref())?;
            let program = quantir::interp::Program::compile(&module, function.as_deref())
                .map_err(|e| JobError::from(e).within(&model))?;
            let feed = jobs::feed_of(&program.inputs, arrays).map_err(|e| e.within(&model))?;
            let outs = program.run(&feed).map_err(|e| JobError::from(e).within(&model))?;
            Ok(program.output_names.iter().cloned().zip(outs).collect::<Vec<_>>())
        })?;
        let dict = PyDict::new(py);
        for (name, t) in outs {
            dict.set_item(name, tensor_to_numpy(py, t)?)?;
        }
        Ok(dict)
    })
}

/// `quantir.merge`: statistics of shards merged in the order given (`Stats` or paths).
#[pyfunction]
fn merge(py: Python<'_>, parts: &Bound<'_, PyList>) -> PyResult<Stats> {
    guard(py, || {
        let mut all = Vec::new();
        for p in parts.iter() {
            if let Ok(s) = p.cast::<Stats>() {
                all.push(s.get().inner.clone());
            } else {
                all.push(Stats::load(py, p.extract::<PathBuf>()?)?.inner);
            }
        }
        let (first, rest) = all
            .split_first_mut()
            .ok_or_else(|| PyValueError::new_err("merge needs at least one statistics object or file"))?;
        for (i, s) in rest.iter().enumerate() {
            first
                .merge(s)
                .map_err(|e| convert::exception(py, "StatsError", &format!("statistics {}: {e}", i + 1)))?;
        }
        Ok(Stats { inner: first.clone() })
    })
}

#[pymodule]
fn _quantir(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Stats>()?;
    m.add_function(wrap_pyfunction!(calibrate, m)?)?;
    m.add_function(wrap_pyfunction!(quantize, m)?)?;
    m.add_function(wrap_pyfunction!(evaluate, m)?)?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(merge, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
