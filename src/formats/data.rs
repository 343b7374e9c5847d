//! Sample data: `.npz` files, folders of `.npy` files and folders of images (see
//! [`images`](super::images)), matched to a function's arguments.
//!
//! The first axis of every array indexes samples. Arrays are matched to arguments by name
//! (`tf.entry_function` input names, ONNX input names), `--input ARG=KEY` overrides, and a
//! function with one argument takes the only array whose element type and rank fit it.
//! Shape and dtype mismatches are errors before any work starts.

use super::images::{is_image, ImageFolder, ImageOptions, ImageShape};
use super::npy_stream::LazyArray;
use crate::interp::InputSpec;
use crate::ir::types::Dim;
use crate::tensor::DType;
use crate::tensor::Tensor;
use ndarray::{ArrayD, Axis, IxDyn};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("{path}: cannot read: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("{path}: array '{array}' has dtype {dtype}, which quantir does not read")]
    Dtype {
        path: PathBuf,
        array: String,
        dtype: String,
    },
    #[error("--input {input}={array}: the model has no input '{input}' (its inputs: {inputs})")]
    UnknownInput {
        input: String,
        array: String,
        inputs: String,
    },
    #[error("{path}: no arrays")]
    Empty { path: PathBuf },
    #[error("{path}: array '{array}' is a scalar; the first axis must index samples")]
    Scalar { path: PathBuf, array: String },
    #[error("{path}: arrays have different sample counts ({a} has {na}, {b} has {nb})")]
    SampleCount {
        path: PathBuf,
        a: String,
        na: usize,
        b: String,
        nb: usize,
    },
    #[error("{path}: no array for input '{input}' ({expected}); arrays: {arrays}")]
    NoMatch {
        path: PathBuf,
        input: String,
        expected: String,
        arrays: String,
    },
    #[error("{path}: input '{input}' could take any of {candidates}; name one with --input {input}=ARRAY")]
    Ambiguous {
        path: PathBuf,
        input: String,
        candidates: String,
    },
    #[error("{path}: array '{array}' for input '{input}': expected {expected} per sample, got {found}")]
    Mismatch {
        path: PathBuf,
        array: String,
        input: String,
        expected: String,
        found: String,
    },
    #[error("{path}: array '{array}', sample {sample}: {count} non-finite value(s) (NaN or ±Inf)")]
    NonFinite {
        path: PathBuf,
        array: String,
        sample: usize,
        count: usize,
    },
    #[error("{path}: no samples")]
    NoSamples { path: PathBuf },
    #[error(transparent)]
    Image(#[from] super::images::ImageError),
    #[error("{path}: a folder of images feeds one image input, but input '{input}' {problem}")]
    ImageInput {
        path: PathBuf,
        input: String,
        problem: String,
    },
}

/// Named arrays whose first axis indexes samples.
#[derive(Debug, Clone)]
pub struct Dataset {
    pub path: PathBuf,
    /// Shared with the bindings made from it. `.npy` files and `.npz` entries are read row by
    /// row when their samples run (a calibration set is often the largest thing in memory).
    pub arrays: Vec<(String, Arc<Array>)>,
    /// A folder of images (then `arrays` is empty).
    pub images: Option<ImageFolder>,
    /// At most this many samples, the first ones, are bound ([`Dataset::first`]); `None`: all.
    pub rows: Option<usize>,
}

/// An array of a data set: in memory, or read row by row from its file.
#[derive(Debug)]
pub enum Array {
    Loaded(Tensor),
    Lazy(LazyArray),
}

impl Array {
    pub fn dtype(&self) -> DType {
        match self {
            Array::Loaded(t) => t.dtype(),
            Array::Lazy(l) => l.dtype,
        }
    }
    pub fn shape(&self) -> &[usize] {
        match self {
            Array::Loaded(t) => t.shape(),
            Array::Lazy(l) => &l.shape,
        }
    }
    /// Row `i` (without the first axis).
    fn row(&self, path: &Path, name: &str, i: usize) -> Result<Tensor, DataError> {
        match self {
            Array::Loaded(t) => Ok(crate::map_tensor!(t, a => a.index_axis(Axis(0), i).to_owned())),
            Array::Lazy(l) => l.row(i).map_err(|reason| DataError::Read {
                path: path.into(),
                reason: format!("array '{name}': {reason}"),
            }),
        }
    }
}

/// Streams every entry of an `.npz` (or an `.npy`) when it can, else reads it whole.
fn open_arrays(path: &Path, npy: bool) -> Result<Vec<(String, Array)>, DataError> {
    let err = |reason: String| DataError::Read {
        path: path.into(),
        reason,
    };
    if npy {
        let name = path.file_stem().unwrap_or_default().to_string_lossy().into_owned();
        return Ok(vec![(
            name,
            match LazyArray::open_npy(path).map_err(err)? {
                Some(l) => Array::Lazy(l),
                None => Array::Loaded(read_npy(path)?),
            },
        )]);
    }
    match LazyArray::open_npz(path).map_err(err)? {
        Some(v) => Ok(v.into_iter().map(|(n, l)| (n, Array::Lazy(l))).collect()),
        None => Ok(read_npz(path)?
            .into_iter()
            .map(|(n, t)| (n, Array::Loaded(t)))
            .collect()),
    }
}

fn read_npz(path: &Path) -> Result<Vec<(String, Tensor)>, DataError> {
    let err = |reason: String| DataError::Read {
        path: path.into(),
        reason,
    };
    let f = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let mut npz = ndarray_npy::NpzReader::new(f).map_err(|e| err(format!("not an .npz file ({e})")))?;
    let names = npz.names().map_err(|e| err(e.to_string()))?;
    let mut out = Vec::new();
    for name in names {
        let t = read_entry(&mut npz, &name).ok_or_else(|| DataError::Dtype {
            path: path.into(),
            array: name.trim_end_matches(".npy").into(),
            dtype: "unsupported".into(),
        })?;
        out.push((name.trim_end_matches(".npy").to_string(), t));
    }
    Ok(out)
}

fn read_entry<R: std::io::Read + std::io::Seek>(npz: &mut ndarray_npy::NpzReader<R>, name: &str) -> Option<Tensor> {
    macro_rules! try_as {
        ($($t:ty => $v:ident),*) => {$(
            if let Ok(a) = npz.by_name::<ndarray::OwnedRepr<$t>, IxDyn>(name) {
                return Some(Tensor::$v(a));
            }
        )*};
    }
    try_as!(f32 => F32, f64 => F64, i64 => I64, i32 => I32, u8 => U8, i8 => I8, i16 => I16, u16 => U16, u32 => U32, u64 => U64, bool => I1);
    None
}

fn read_npy(path: &Path) -> Result<Tensor, DataError> {
    let err = |reason: String| DataError::Read {
        path: path.into(),
        reason,
    };
    macro_rules! try_as {
        ($($t:ty => $v:ident),*) => {$(
            let f = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
            if let Ok(a) = <ArrayD<$t> as ndarray_npy::ReadNpyExt>::read_npy(f) {
                return Ok(Tensor::$v(a));
            }
        )*};
    }
    try_as!(f32 => F32, f64 => F64, i64 => I64, i32 => I32, u8 => U8, i8 => I8, i16 => I16, u16 => U16, u32 => U32, u64 => U64, bool => I1);
    Err(err("not an .npy file of a supported dtype".into()))
}

impl Dataset {
    /// Reads an `.npz` file or a folder of `.npy` files (each file one array, named by its stem).
    pub fn open(path: &Path) -> Result<Dataset, DataError> {
        Dataset::open_with(path, &ImageOptions::default())
    }

    /// Like [`open`](Self::open); a folder with images and no `.npy` file is an image folder
    /// decoded with `images`.
    pub fn open_with(path: &Path, images: &ImageOptions) -> Result<Dataset, DataError> {
        let arrays = if path.is_dir() {
            let listing: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|e| DataError::Read {
                    path: path.into(),
                    reason: e.to_string(),
                })?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect();
            let mut files: Vec<PathBuf> = listing
                .iter()
                .filter(|p| p.extension().is_some_and(|x| x == "npy"))
                .cloned()
                .collect();
            if files.is_empty() && listing.iter().any(|p| is_image(p)) {
                return Ok(Dataset {
                    path: path.into(),
                    arrays: Vec::new(),
                    images: Some(ImageFolder::open(path, images)?),
                    rows: None,
                });
            }
            files.sort();
            let mut arrays = Vec::new();
            for f in &files {
                arrays.extend(open_arrays(f, true)?);
            }
            arrays
        } else if !path.exists() {
            return Err(DataError::Read {
                path: path.into(),
                reason: "No such file or directory".into(),
            });
        } else {
            open_arrays(path, path.extension().is_some_and(|x| x == "npy"))?
        };
        if arrays.is_empty() {
            return Err(DataError::Empty { path: path.into() });
        }
        for (n, t) in &arrays {
            if t.shape().is_empty() {
                return Err(DataError::Scalar {
                    path: path.into(),
                    array: n.clone(),
                });
            }
        }
        Ok(Dataset {
            path: path.into(),
            arrays: arrays.into_iter().map(|(n, a)| (n, Arc::new(a))).collect(),
            images: None,
            rows: None,
        })
    }

    /// The data set's first `n` samples (`--limit`), as a view: nothing is read or copied.
    pub fn first(&self, n: usize) -> Dataset {
        Dataset {
            rows: Some(self.rows.map_or(n, |r| r.min(n))),
            ..self.clone()
        }
    }

    pub fn array(&self, name: &str) -> Option<&Array> {
        self.arrays.iter().find(|(n, _)| n == name).map(|(_, t)| t.as_ref())
    }

    /// The whole array `name` in memory (labels and other small arrays).
    pub fn load(&self, name: &str) -> Option<Result<Tensor, DataError>> {
        Some(match self.array(name)? {
            Array::Loaded(t) => Ok(t.clone()),
            Array::Lazy(l) => l.load().map_err(|reason| DataError::Read {
                path: self.path.clone(),
                reason: format!("array '{name}': {reason}"),
            }),
        })
    }
}

/// Does an array of per-sample shape `sample` fit an argument of `dims`? Either exactly, or
/// with a leading batch dim of 1 (or dynamic) added.
fn fits(sample: &[usize], dims: &[Dim]) -> bool {
    let same = |s: &[usize], d: &[Dim]| {
        s.len() == d.len()
            && s.iter()
                .zip(d)
                .all(|(&n, d)| matches!(d, Dim::Dynamic) || *d == Dim::Static(n))
    };
    same(sample, dims)
        || (dims.len() == sample.len() + 1
            && matches!(dims[0], Dim::Dynamic | Dim::Static(1))
            && same(sample, &dims[1..]))
}

fn describe(spec: &InputSpec) -> String {
    spec.r#type.clone()
}

/// Where one input's samples come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// Rows of an array (first axis = samples).
    Array(Arc<Array>),
    /// One decoded image per sample.
    Images(ImageFolder, ImageShape),
}

/// What identifies a data file's (or an image folder's files') contents cheaply: each file's
/// name, length and modification time. Calibration compares it before and after reading, so
/// that a file rewritten meanwhile is an error, never statistics of a mix of two files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(Vec<(PathBuf, u64, Option<std::time::SystemTime>)>);

/// The files of a data folder (an image folder), sorted by path: what its cache key hashes and
/// its fingerprint covers.
pub fn folder_files(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

impl Fingerprint {
    pub fn of(path: &Path) -> std::io::Result<Fingerprint> {
        let one = |p: &Path| -> std::io::Result<(PathBuf, u64, Option<std::time::SystemTime>)> {
            let m = std::fs::metadata(p)?;
            Ok((p.to_path_buf(), m.len(), m.modified().ok()))
        };
        if path.is_dir() {
            folder_files(path)?
                .iter()
                .map(|f| one(f))
                .collect::<std::io::Result<_>>()
                .map(Fingerprint)
        } else {
            Ok(Fingerprint(vec![one(path)?]))
        }
    }

    /// An error naming `path` when its contents are not those fingerprinted.
    pub fn check(&self, path: &Path) -> Result<(), DataError> {
        let changed = |how: &str| DataError::Read {
            path: path.into(),
            reason: format!("{how} while it was being read; nothing written (run again on data that stays put)"),
        };
        match Fingerprint::of(path) {
            Ok(now) if now == *self => Ok(()),
            Ok(_) => Err(changed("changed")),
            Err(_) => Err(changed("disappeared")),
        }
    }
}

/// One input's samples.
#[derive(Debug, Clone)]
pub struct Column {
    /// The array's name (the folder's path for images).
    pub name: String,
    pub source: Source,
    /// Samples get a leading batch dim of 1 the data does not have.
    pub add_batch: bool,
}

/// The arrays of `data` bound to each input of a function, ready to be cut into samples.
#[derive(Debug, Clone)]
pub struct Binding {
    pub path: PathBuf,
    pub columns: Vec<Column>,
    pub samples: usize,
    /// Let NaN and ±Inf through (`run` computes what the model computes on them; calibration
    /// and evaluation refuse them, or calibration skips them when asked).
    pub allow_non_finite: bool,
}

/// Binds an image folder to the function's only input (f32, rank 4).
fn bind_images(path: &Path, folder: &ImageFolder, inputs: &[InputSpec]) -> Result<Binding, DataError> {
    let problem = |spec: &InputSpec, problem: String| DataError::ImageInput {
        path: path.into(),
        input: spec.name.clone(),
        problem,
    };
    let spec = match inputs {
        [one] => one,
        [_, second, ..] => return Err(problem(second, "is a second input".into())),
        [] => return Err(DataError::NoSamples { path: path.into() }),
    };
    if spec.dtype != Some(crate::tensor::DType::F32) {
        return Err(problem(spec, format!("is {}, not f32", spec.r#type)));
    }
    let dims: Vec<Option<usize>> = spec
        .dims
        .iter()
        .map(|d| match d {
            Dim::Static(n) => Some(*n),
            Dim::Dynamic => None,
        })
        .collect();
    let shape = folder.shape_for(&dims).map_err(|e| problem(spec, e))?;
    Ok(Binding {
        path: path.into(),
        columns: vec![Column {
            name: path.display().to_string(),
            source: Source::Images(folder.clone(), shape),
            add_batch: true,
        }],
        allow_non_finite: false,
        samples: folder.files.len(),
    })
}

/// Matches arrays to inputs (by name, override, or the only fitting array) and checks every
/// shape and dtype before any sample runs.
pub fn bind(data: &Dataset, inputs: &[InputSpec], overrides: &[(String, String)]) -> Result<Binding, DataError> {
    let mut b = bind_all(data, inputs, overrides)?;
    if let Some(n) = data.rows {
        if n == 0 {
            return Err(DataError::NoSamples {
                path: data.path.clone(),
            });
        }
        b.samples = b.samples.min(n);
    }
    Ok(b)
}

/// [`bind`] over every sample of the data.
fn bind_all(data: &Dataset, inputs: &[InputSpec], overrides: &[(String, String)]) -> Result<Binding, DataError> {
    let path = &data.path;
    if let Some(folder) = &data.images {
        return bind_images(path, folder, inputs);
    }
    // an --input naming no input of the model would otherwise be ignored, silently
    if let Some((input, array)) = overrides
        .iter()
        .find(|(i, _)| !inputs.iter().any(|s| s.name == *i || s.key == *i))
    {
        return Err(DataError::UnknownInput {
            input: input.clone(),
            array: array.clone(),
            inputs: inputs.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", "),
        });
    }
    let mut columns = Vec::new();
    for spec in inputs {
        let chosen = if let Some((_, a)) = overrides.iter().find(|(i, _)| *i == spec.name || *i == spec.key) {
            a.clone()
        } else if data.array(&spec.name).is_some() {
            spec.name.clone()
        } else {
            let fitting: Vec<&String> = data
                .arrays
                .iter()
                .filter(|(_, t)| Some(t.dtype()) == spec.dtype && fits(&t.shape()[1..], &spec.dims))
                .map(|(n, _)| n)
                .collect();
            match fitting.as_slice() {
                [one] if inputs.len() == 1 => (*one).clone(),
                [] | [_] => {
                    let arrays = data
                        .arrays
                        .iter()
                        .map(|(n, t)| format!("{n} {}{:?}", t.dtype(), t.shape()))
                        .collect::<Vec<_>>()
                        .join(", ");
                    return Err(DataError::NoMatch {
                        path: path.clone(),
                        input: spec.name.clone(),
                        expected: describe(spec),
                        arrays,
                    });
                }
                many => {
                    return Err(DataError::Ambiguous {
                        path: path.clone(),
                        input: spec.name.clone(),
                        candidates: many.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
                    })
                }
            }
        };
        let t = data.array(&chosen).ok_or_else(|| DataError::NoMatch {
            path: path.clone(),
            input: spec.name.clone(),
            expected: describe(spec),
            arrays: format!("no array named '{chosen}'"),
        })?;
        let sample = &t.shape()[1..];
        if Some(t.dtype()) != spec.dtype || !fits(sample, &spec.dims) {
            return Err(DataError::Mismatch {
                path: path.clone(),
                array: chosen,
                input: spec.name.clone(),
                expected: describe(spec),
                found: format!("{} of shape {:?}", t.dtype(), sample),
            });
        }
        let add_batch = spec.dims.len() == sample.len() + 1;
        let shared = data
            .arrays
            .iter()
            .find(|(n, _)| *n == chosen)
            .map(|(_, a)| a.clone())
            .ok_or_else(|| DataError::Empty { path: path.clone() })?;
        columns.push((chosen, shared, add_batch));
    }
    let samples = columns.first().map(|c| c.1.shape()[0]).unwrap_or(0);
    for w in columns.windows(2) {
        let (na, nb) = (w[0].1.shape()[0], w[1].1.shape()[0]);
        if na != nb {
            return Err(DataError::SampleCount {
                path: path.clone(),
                a: w[0].0.clone(),
                na,
                b: w[1].0.clone(),
                nb,
            });
        }
    }
    let columns = columns
        .into_iter()
        .map(|(name, t, add_batch)| Column {
            name,
            source: Source::Array(t),
            add_batch,
        })
        .collect();
    if samples == 0 {
        return Err(DataError::NoSamples { path: path.clone() });
    }
    Ok(Binding {
        path: path.clone(),
        columns,
        samples,
        allow_non_finite: false,
    })
}

impl Binding {
    /// True when some input is read from a stream that is cheapest to read in sample order.
    pub fn streams(&self) -> bool {
        self.columns
            .iter()
            .any(|c| matches!(&c.source, Source::Array(a) if matches!(a.as_ref(), Array::Lazy(_))))
    }

    /// The inputs of sample `i`; float samples holding NaN or ±Inf are an error naming them
    /// unless [`Binding::allow_non_finite`].
    pub fn sample(&self, i: usize) -> Result<Vec<Tensor>, DataError> {
        self.columns
            .iter()
            .map(
                |Column {
                     name,
                     source,
                     add_batch,
                 }| {
                    let s = match source {
                        Source::Array(t) => {
                            let row = t.row(&self.path, name, i)?;
                            if *add_batch {
                                crate::map_tensor!(row, a => a.insert_axis(Axis(0)))
                            } else {
                                row
                            }
                        }
                        Source::Images(folder, shape) => Tensor::F32(folder.load(i, *shape)?),
                    };
                    if let (Tensor::F32(a), false) = (&s, self.allow_non_finite) {
                        let bad = non_finite(a);
                        if bad > 0 {
                            return Err(DataError::NonFinite {
                                path: self.path.clone(),
                                array: name.clone(),
                                sample: i,
                                count: bad,
                            });
                        }
                    }
                    Ok(s)
                },
            )
            .collect()
    }
}

/// How many values of `a` are NaN or ±Inf; a sum over the contiguous buffer (which vectorizes)
/// where there is one, since every sample of a run is checked.
fn non_finite(a: &ndarray::ArrayD<f32>) -> usize {
    match a.as_slice_memory_order() {
        Some(v) => v.iter().map(|x| usize::from(!x.is_finite())).sum(),
        None => a.iter().filter(|x| !x.is_finite()).count(),
    }
}

impl Dataset {
    /// A data set of arrays in memory (a Python dict of NumPy arrays), called `label` in
    /// messages; the first axis of every array indexes samples, as in an `.npz`.
    pub fn from_arrays(label: &str, arrays: Vec<(String, Tensor)>) -> Result<Dataset, DataError> {
        let path = PathBuf::from(label);
        if arrays.is_empty() {
            return Err(DataError::Empty { path });
        }
        if let Some((n, _)) = arrays.iter().find(|(_, t)| t.shape().is_empty()) {
            return Err(DataError::Scalar { path, array: n.clone() });
        }
        Ok(Dataset {
            path,
            arrays: arrays
                .into_iter()
                .map(|(n, t)| (n, Arc::new(Array::Loaded(t))))
                .collect(),
            images: None,
            rows: None,
        })
    }
}

/// The samples of one item of a stream (a dict of arrays a Python generator or an
/// onnxruntime `CalibrationDataReader` gives), called `label` in messages: one sample when its
/// arrays fit the inputs as they are, or without their batch dim (a feed, as onnxruntime's
/// readers give); otherwise a batch whose first axis indexes samples, bound as an `.npz` is.
/// Either way each sample is the tensor list [`Binding::sample`] gives for the same sample of
/// an `.npz`.
pub fn item_samples(
    label: &str,
    arrays: Vec<(String, Tensor)>,
    inputs: &[InputSpec],
    overrides: &[(String, String)],
) -> Result<Vec<Vec<Tensor>>, DataError> {
    let one: Vec<(String, Tensor)> = arrays
        .iter()
        .map(|(n, t)| (n.clone(), crate::map_tensor!(t, a => a.clone().insert_axis(Axis(0)))))
        .collect();
    if let Ok(b) = bind(&Dataset::from_arrays(label, one)?, inputs, overrides) {
        return Ok(vec![b.sample(0)?]);
    }
    let b = bind(&Dataset::from_arrays(label, arrays)?, inputs, overrides)?;
    (0..b.samples).map(|i| b.sample(i)).collect()
}
