//! Conversions at the Python edge: NumPy arrays to and from quantir's tensors, Python streams
//! (iterators, `CalibrationDataReader`s) to the library's item streams, and job errors to the
//! exception classes of `quantir/errors.py`.

use numpy::{PyArrayDyn, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::exceptions::{PyRuntimeError, PyStopIteration, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use quantir::formats::data::DataError;
use quantir::jobs::{Item, JobError};
use quantir::tensor::Tensor;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The first exception a Python callback raised during a job (KeyboardInterrupt, the user's
/// generator failing): it ends the job and is raised again as is.
#[derive(Clone, Default)]
pub struct Raised(Arc<Mutex<Option<PyErr>>>);

impl Raised {
    pub fn keep(&self, e: PyErr) {
        if let Ok(mut slot) = self.0.lock() {
            slot.get_or_insert(e);
        }
    }
    pub fn take(&self) -> Option<PyErr> {
        self.0.lock().ok().and_then(|mut s| s.take())
    }
}

/// The `quantir.errors` class `kind` with `message` (a `RuntimeError` if that module is gone).
pub fn exception(py: Python<'_>, kind: &str, message: &str) -> PyErr {
    let made = py
        .import("quantir.errors")
        .and_then(|m| m.getattr(kind))
        .and_then(|class| class.call1((message,)));
    match made {
        Ok(value) => PyErr::from_value(value),
        Err(_) => PyRuntimeError::new_err(message.to_string()),
    }
}

/// [`exception`] with the GIL taken here.
pub fn exception_now(kind: &str, message: &str) -> PyErr {
    Python::attach(|py| exception(py, kind, message))
}

/// The exception class of an error's kind (see `quantir/errors.py`).
pub fn kind_of(e: &JobError) -> &'static str {
    use quantir::quantize::calibrate::CalibrateError;
    use quantir::run::RunError;
    match e.root() {
        JobError::Usage(_) | JobError::Recipe(_) => "ConfigError",
        JobError::Format(_) => "ModelError",
        JobError::Data(_) | JobError::Run(RunError::Data(_)) => "DataError",
        JobError::Calibrate(CalibrateError::Run(RunError::Data(_))) => "DataError",
        JobError::Calibrate(CalibrateError::Ir(_)) => "ModelError",
        JobError::Calibrate(_) => "CalibrationError",
        JobError::Quantize(quantir::quantize::QuantizeError::Stats(_)) => "StatsError",
        JobError::Quantize(_) | JobError::Pass(_) => "QuantizationError",
        JobError::Evaluate(quantir::evaluate::EvalError::Data(_)) => "DataError",
        JobError::Evaluate(quantir::evaluate::EvalError::Run(RunError::Data(_))) => "DataError",
        JobError::Evaluate(_) => "EvaluationError",
        JobError::Stats(_) => "StatsError",
        JobError::Interp(_) | JobError::Run(_) => "ExecutionError",
        JobError::Write(_) => "QuantirError",
        JobError::Target(quantir::target::TargetError::Data(_)) => "DataError",
        JobError::Target(_) => "QuantizationError",
        JobError::In { .. } => "QuantirError",
    }
}

/// A NumPy array (or anything `numpy.asarray` takes) as a tensor, copied once; `what` names it
/// in errors.
pub fn tensor_from_py(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Tensor> {
    let np = obj.py().import("numpy")?;
    // C order first: the copy below is then one memcpy, whatever the strides were
    let arr = np.call_method1("ascontiguousarray", (obj,))?;
    macro_rules! try_dtypes {
        ($($t:ty => $v:ident),*) => {$(
            if let Ok(a) = arr.cast::<PyArrayDyn<$t>>() {
                let ro = a.readonly();
                let values = ro.as_slice().map_err(|e| PyValueError::new_err(format!("{what}: {e}")))?.to_vec();
                let t = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(a.shape()), values)
                    .map_err(|e| PyValueError::new_err(format!("{what}: {e}")))?;
                return Ok(Tensor::$v(t));
            }
        )*};
    }
    try_dtypes!(f32 => F32, f64 => F64, half::f16 => F16, i64 => I64, i32 => I32, i16 => I16, i8 => I8,
        u8 => U8, u16 => U16, u32 => U32, u64 => U64, bool => I1);
    let dtype = arr
        .cast::<numpy::PyUntypedArray>()
        .map(|a| a.dtype().to_string())
        .unwrap_or_else(|_| "an object".into());
    Err(exception(
        obj.py(),
        "DataError",
        &format!("{what}: dtype {dtype}, which quantir does not read (float16/32/64, int8-64, uint8-64, bool)"),
    ))
}

/// A dict `{name: array}` as named tensors, in the dict's order; `what` names it in errors.
pub fn arrays_from_dict(dict: &Bound<'_, PyDict>, what: &str) -> PyResult<Vec<(String, Tensor)>> {
    let mut out = Vec::with_capacity(dict.len());
    for (k, v) in dict.iter() {
        let name: String = k.extract().map_err(|_| {
            PyValueError::new_err(format!(
                "{what}: keys must be input names (str), got {}",
                k.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        })?;
        let t = tensor_from_py(&v, &format!("{what}: array '{name}'"))?;
        out.push((name, t));
    }
    Ok(out)
}

/// A tensor handed to NumPy without a copy.
pub fn tensor_to_numpy(py: Python<'_>, t: Tensor) -> PyResult<Bound<'_, PyAny>> {
    Ok(match t {
        Tensor::F32(a) => PyArrayDyn::from_owned_array(py, a).into_any(),
        Tensor::F64(a) => PyArrayDyn::from_owned_array(py, a).into_any(),
        Tensor::F16(a) => PyArrayDyn::from_owned_array(py, a).into_any(),
        Tensor::I1(a) => PyArrayDyn::from_owned_array(py, a).into_any(),
        Tensor::I8(a) => PyArrayDyn::from_owned_array(py, a).into_any(),
        Tensor::U8(a) => PyArrayDyn::from_owned_array(py, a).into_any(),
        Tensor::I16(a) => PyArrayDyn::from_owned_array(py, a).into_any(),
        Tensor::U16(a) => PyArrayDyn::from_owned_array(py, a).into_any(),
        Tensor::I32(a) => PyArrayDyn::from_owned_array(py, a).into_any(),
        Tensor::U32(a) => PyArrayDyn::from_owned_array(py, a).into_any(),
        Tensor::I64(a) => PyArrayDyn::from_owned_array(py, a).into_any(),
        Tensor::U64(a) => PyArrayDyn::from_owned_array(py, a).into_any(),
        // NumPy has no bfloat16: widened exactly to float32
        Tensor::BF16(a) => PyArrayDyn::from_owned_array(py, a.mapv(f32::from)).into_any(),
    })
}

/// A Python stream of calibration items read one at a time with the GIL taken for each: an
/// iterator of dicts, or an object with onnxruntime's `CalibrationDataReader` protocol
/// (`get_next()` returning a dict, then `None`). Ctrl-C is checked before every item.
pub struct PyItems {
    source: Py<PyAny>,
    reader: bool,
    read: usize,
    done: bool,
    raised: Raised,
}

impl PyItems {
    pub fn new(obj: &Bound<'_, PyAny>, raised: Raised) -> PyResult<PyItems> {
        let reader = obj.hasattr("get_next")?;
        let source = if reader {
            obj.clone().unbind()
        } else {
            obj.try_iter()
                .map_err(|_| {
                    PyValueError::new_err(format!(
                        "calibration: expected a path, a dict of arrays, an iterable of dicts or an object with get_next(), got {}",
                        obj.get_type().name().map(|n| n.to_string()).unwrap_or_default()
                    ))
                })?
                .into_any()
                .unbind()
        };
        Ok(PyItems {
            source,
            reader,
            read: 0,
            done: false,
            raised,
        })
    }

    fn next_item(&mut self, py: Python<'_>) -> PyResult<Option<Vec<(String, Tensor)>>> {
        py.check_signals()?;
        let src = self.source.bind(py);
        let item = if self.reader {
            src.call_method0("get_next")?
        } else {
            match src.call_method0("__next__") {
                Ok(v) => v,
                Err(e) if e.is_instance_of::<PyStopIteration>(py) => return Ok(None),
                Err(e) => return Err(e),
            }
        };
        if item.is_none() {
            return Ok(None);
        }
        let what = format!("calibration item {}", self.read);
        let dict = item.cast::<PyDict>().map_err(|_| {
            PyValueError::new_err(format!(
                "{what}: expected a dict {{input name: array}}, got {}",
                item.get_type().name().map(|n| n.to_string()).unwrap_or_default()
            ))
        })?;
        arrays_from_dict(dict, &what).map(Some)
    }
}

impl Iterator for PyItems {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        if self.done {
            return None;
        }
        let r = Python::attach(|py| self.next_item(py));
        let at = self.read;
        self.read += 1;
        match r {
            Ok(Some(arrays)) => Some(Ok(arrays)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                let reason = e.to_string();
                self.raised.keep(e);
                Some(Err(DataError::Read {
                    path: PathBuf::from(format!("calibration item {at}")),
                    reason,
                }))
            }
        }
    }
}
