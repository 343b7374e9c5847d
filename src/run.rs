//! Running a compiled program over a data set: samples in parallel (each on one thread, so
//! results never depend on the thread count), outputs in sample order.

use crate::formats::data::{Binding, DataError};
use crate::interp::{InterpError, Program, Watch};
use crate::tensor::Tensor;
use rayon::prelude::*;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Data(#[from] DataError),
    /// The interpreter's error on one sample (held as `error`, not as a `source`, so that a
    /// report of the error chain does not print it twice).
    #[error("sample {sample}: {error}")]
    Interp { sample: usize, error: InterpError },
    #[error("cannot start {threads} worker threads: {reason}")]
    Threads { threads: usize, reason: String },
    #[error("{0}")]
    Output(String),
}

/// A progress bar on a terminal, nothing when stderr is not one.
pub fn progress(len: usize, what: &str) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new(len as u64);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} samples, {per_sec}, eta {eta}")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(what.to_string());
    pb
}

/// A rayon pool of `threads` workers (0 = all cores).
pub fn pool(threads: usize) -> Result<rayon::ThreadPool, RunError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| RunError::Threads {
            threads,
            reason: e.to_string(),
        })
}

/// The samples of one chunk; when the data are read from a stream (lazy `.npz` rows), their
/// inputs are read here, in sample order, so that the decoder never goes back.
#[allow(clippy::type_complexity)]
fn chunk_jobs(data: &Binding, indices: &[usize]) -> Vec<(usize, Option<Result<Vec<Tensor>, DataError>>)> {
    let stream = data.streams();
    indices.iter().map(|&i| (i, stream.then(|| data.sample(i)))).collect()
}

/// Runs the samples `indices`, `threads` at a time. For every chunk of samples the
/// watched values are handed to `observe(sample, key, value)` in sample order, after the chunk
/// ran, so that observers see the same sequence whatever the thread count. Returns the
/// outputs of every sample when `keep_outputs`.
#[allow(clippy::too_many_arguments)]
pub fn run_samples(
    program: &Program,
    data: &Binding,
    indices: &[usize],
    threads: usize,
    watch: &Watch,
    keep_outputs: bool,
    observe: &mut dyn FnMut(usize, &str, &Tensor) -> Result<(), String>,
    what: &str,
) -> Result<Vec<Vec<Tensor>>, RunError> {
    let mut outputs = Vec::new();
    run_chunks(
        program,
        data,
        indices,
        threads,
        watch,
        &Vec::new,
        &|seen: &mut Vec<(String, Tensor)>, _, k, v| {
            seen.push((k.to_string(), v.clone()));
            Ok(())
        },
        &mut |i, out, seen| {
            for (k, v) in &seen {
                observe(i, k, v).map_err(|m| observer_error(i, k, m))?;
            }
            if keep_outputs {
                outputs.push(out);
            }
            Ok(())
        },
        what,
    )?;
    Ok(outputs)
}

fn observer_error(sample: usize, key: &str, message: String) -> RunError {
    RunError::Interp {
        sample,
        error: InterpError::Observer {
            key: key.to_string(),
            message,
        },
    }
}

/// Like [`run_samples`] for reductions: each worker folds the watched values of one sample
/// into a fresh `S` (`init`, `fold`) as they are computed, and `combine` receives the samples'
/// states in sample order. Memory holds one state per sample in flight instead of every
/// watched tensor, and the result is independent of the thread count when `combine` is an
/// exact merge.
#[allow(clippy::too_many_arguments)]
pub fn run_samples_fold<S: Send>(
    program: &Program,
    data: &Binding,
    indices: &[usize],
    threads: usize,
    watch: &Watch,
    init: &(dyn Fn() -> S + Sync),
    fold: &(dyn Fn(&mut S, usize, &str, &Tensor) -> Result<(), String> + Sync),
    combine: &mut dyn FnMut(usize, S) -> Result<(), String>,
    what: &str,
) -> Result<(), RunError> {
    run_chunks(
        program,
        data,
        indices,
        threads,
        watch,
        init,
        fold,
        &mut |i, _, state| combine(i, state).map_err(|m| observer_error(i, "", m)),
        what,
    )
}

/// The loop under both: chunks of 2 × threads samples run in parallel, each folding its watched
/// values into its own state; `combine` then sees (sample, outputs, state) in sample order.
#[allow(clippy::too_many_arguments)]
fn run_chunks<S: Send>(
    program: &Program,
    data: &Binding,
    indices: &[usize],
    threads: usize,
    watch: &Watch,
    init: &(dyn Fn() -> S + Sync),
    fold: &(dyn Fn(&mut S, usize, &str, &Tensor) -> Result<(), String> + Sync),
    combine: &mut dyn FnMut(usize, Vec<Tensor>, S) -> Result<(), RunError>,
    what: &str,
) -> Result<(), RunError> {
    let n = indices.len();
    let pool = pool(threads)?;
    let chunk = pool.current_num_threads().max(1) * 2;
    let pb = progress(n, what);
    let mut start = 0;
    while start < n {
        let end = (start + chunk).min(n);
        let jobs = chunk_jobs(data, &indices[start..end]);
        let results: Vec<Result<(Vec<Tensor>, S), RunError>> = pool.install(|| {
            jobs.into_par_iter()
                .map(|(i, pre)| {
                    let inputs = match pre {
                        Some(r) => r?,
                        None => data.sample(i)?,
                    };
                    let mut state = init();
                    let out = program
                        .run_observed(&inputs, watch, &mut |k, v| fold(&mut state, i, k, v))
                        .map_err(|error| RunError::Interp { sample: i, error })?;
                    Ok((out, state))
                })
                .collect()
        });
        for (&i, r) in indices[start..end].iter().zip(results) {
            let (out, state) = r?;
            combine(i, out, state)?;
        }
        pb.inc((end - start) as u64);
        start = end;
    }
    pb.finish_and_clear();
    Ok(())
}

/// Stacks per-sample outputs along a new first axis; when the inputs had a batch dim of 1 added,
/// the outputs' leading 1 is dropped (concatenation), so N samples of [1, 10] give [N, 10].
pub fn stack_outputs(per_sample: &[Vec<Tensor>], concat: bool) -> Result<Vec<Tensor>, RunError> {
    let Some(first) = per_sample.first() else {
        return Ok(Vec::new());
    };
    (0..first.len())
        .map(|j| {
            let col: Vec<&Tensor> = per_sample.iter().map(|o| &o[j]).collect();
            let can_concat = concat && col.iter().all(|t| t.shape().first() == Some(&1));
            if can_concat {
                crate::interp::kernels::layout::concat(&col, 0)
            } else {
                crate::interp::kernels::layout::pack(&col, 0)
            }
            .map_err(RunError::Output)
        })
        .collect()
}

/// An f16 as NumPy stores it (`<f2`): ndarray-npy has no half-precision element type.
#[derive(Clone, Copy)]
struct F16Le(u16);

impl ndarray_npy::WritableElement for F16Le {
    fn type_descriptor() -> py_literal::Value {
        py_literal::Value::String("<f2".into())
    }

    fn write<W: std::io::Write>(&self, mut w: W) -> Result<(), ndarray_npy::WriteDataError> {
        Ok(w.write_all(&self.0.to_le_bytes())?)
    }

    fn write_slice<W: std::io::Write>(s: &[Self], mut w: W) -> Result<(), ndarray_npy::WriteDataError> {
        let bytes: Vec<u8> = s.iter().flat_map(|v| v.0.to_le_bytes()).collect();
        Ok(w.write_all(&bytes)?)
    }
}

/// Writes named tensors as an `.npz` file, atomically.
pub fn write_npz(
    path: &std::path::Path,
    named: &[(String, Tensor)],
    inputs: &[&std::path::Path],
) -> Result<(), RunError> {
    let mut buf = std::io::Cursor::new(Vec::new());
    {
        let mut w = ndarray_npy::NpzWriter::new(&mut buf);
        for (name, t) in named {
            let r = match t {
                Tensor::F32(a) => w.add_array(name.as_str(), a),
                Tensor::F64(a) => w.add_array(name.as_str(), a),
                Tensor::I64(a) => w.add_array(name.as_str(), a),
                Tensor::I32(a) => w.add_array(name.as_str(), a),
                Tensor::I8(a) => w.add_array(name.as_str(), a),
                Tensor::U8(a) => w.add_array(name.as_str(), a),
                Tensor::I16(a) => w.add_array(name.as_str(), a),
                Tensor::U16(a) => w.add_array(name.as_str(), a),
                Tensor::U32(a) => w.add_array(name.as_str(), a),
                Tensor::U64(a) => w.add_array(name.as_str(), a),
                Tensor::I1(a) => w.add_array(name.as_str(), a),
                Tensor::F16(a) => w.add_array(name.as_str(), &a.mapv(|v| F16Le(v.to_bits()))),
                other => {
                    return Err(RunError::Output(format!(
                        "cannot write a {} array to .npz",
                        other.dtype()
                    )))
                }
            };
            r.map_err(|e| RunError::Output(format!("{}: {e}", path.display())))?;
        }
        w.finish()
            .map_err(|e| RunError::Output(format!("{}: {e}", path.display())))?;
    }
    crate::fsutil::write_atomic(path, buf.get_ref(), inputs).map_err(|e| RunError::Output(e.to_string()))
}
