//! Sample data: `.npz` files, folders of `.npy` files and folders of images (see
//! [`images`](super::images)), matched to a function's arguments.
//!
//! The first axis of every array indexes samples. Arrays are matched to arguments by name
//! (`tf.entry_function` input names, ONNX input names), `--input ARG=KEY` overrides, and a
//! function with one argument takes the only array whose element type and rank fit it.
//! Shape and dtype mismatches are errors before any work starts.

use super::images::{is_image, ImageFolder, ImageOptions, ImageShape};
use crate::interp::InputSpec;
use crate::ir::types::Dim;
use crate::tensor::Tensor;
use ndarray::{ArrayD, Axis, IxDyn};
use std::path::{Path, PathBuf};

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
    pub arrays: Vec<(String, Tensor)>,
    /// A folder of images (then `arrays` is empty).
    pub images: Option<ImageFolder>,
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
    try_as!(f32 => F32, f64 => F64, i64 => I64, i32 => I32, u8 => U8, i8 => I8, i16 => I16, u16 => U16, bool => I1);
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
    try_as!(f32 => F32, f64 => F64, i64 => I64, i32 => I32, u8 => U8, i8 => I8, i16 => I16, u16 => U16, bool => I1);
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
                });
            }
            files.sort();
            files
                .iter()
                .map(|f| {
                    Ok((
                        f.file_stem().unwrap_or_default().to_string_lossy().into_owned(),
                        read_npy(f)?,
                    ))
                })
                .collect::<Result<Vec<_>, DataError>>()?
        } else if !path.exists() {
            return Err(DataError::Read {
                path: path.into(),
                reason: "No such file or directory".into(),
            });
        } else if path.extension().is_some_and(|x| x == "npy") {
            vec![(
                path.file_stem().unwrap_or_default().to_string_lossy().into_owned(),
                read_npy(path)?,
            )]
        } else {
            read_npz(path)?
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
            arrays,
            images: None,
        })
    }

    pub fn array(&self, name: &str) -> Option<&Tensor> {
        self.arrays.iter().find(|(n, _)| n == name).map(|(_, t)| t)
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
    Array(Tensor),
    /// One decoded image per sample.
    Images(ImageFolder, ImageShape),
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
        samples: folder.files.len(),
    })
}

/// Matches arrays to inputs (by name, override, or the only fitting array) and checks every
/// shape and dtype before any sample runs.
pub fn bind(data: &Dataset, inputs: &[InputSpec], overrides: &[(String, String)]) -> Result<Binding, DataError> {
    let path = &data.path;
    if let Some(folder) = &data.images {
        return bind_images(path, folder, inputs);
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
        columns.push((chosen, t.clone(), add_batch));
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
    })
}

impl Binding {
    /// The inputs of sample `i`; float samples holding NaN or ±Inf are an error naming them.
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
                        Source::Array(t) => crate::map_tensor!(t, a => {
                            let v = a.index_axis(Axis(0), i).to_owned();
                            if *add_batch { v.insert_axis(Axis(0)) } else { v }
                        }),
                        Source::Images(folder, shape) => Tensor::F32(folder.load(i, *shape)?),
                    };
                    if let Tensor::F32(a) = &s {
                        let bad = a.iter().filter(|x| !x.is_finite()).count();
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
