//! Sample data: `.npz` files and folders of `.npy` files, matched to a function's arguments.
//!
//! The first axis of every array indexes samples. Arrays are matched to arguments by name
//! (`tf.entry_function` input names, ONNX input names), `--input ARG=KEY` overrides, and a
//! function with one argument takes the only array whose element type and rank fit it.
//! Shape and dtype mismatches are errors before any work starts.

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
}

/// Named arrays whose first axis indexes samples.
#[derive(Debug, Clone)]
pub struct Dataset {
    pub path: PathBuf,
    pub arrays: Vec<(String, Tensor)>,
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
        let arrays = if path.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|e| DataError::Read {
                    path: path.into(),
                    reason: e.to_string(),
                })?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "npy"))
                .collect();
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

/// The arrays of `data` bound to each input of a function, ready to be cut into samples.
#[derive(Debug, Clone)]
pub struct Binding {
    pub path: PathBuf,
    /// (array name, array, whether a batch dim of 1 is added) per input.
    pub columns: Vec<(String, Tensor, bool)>,
    pub samples: usize,
}

/// Matches arrays to inputs (by name, override, or the only fitting array) and checks every
/// shape and dtype before any sample runs.
pub fn bind(data: &Dataset, inputs: &[InputSpec], overrides: &[(String, String)]) -> Result<Binding, DataError> {
    let path = &data.path;
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
            .map(|(name, t, add_batch)| {
                let s = crate::map_tensor!(t, a => {
                    let v = a.index_axis(Axis(0), i).to_owned();
                    if *add_batch { v.insert_axis(Axis(0)) } else { v }
                });
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
            })
            .collect()
    }
}
