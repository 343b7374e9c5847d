//! Running a compiled program over samples — a bound data set or a stream read in order (a
//! Python generator): samples in parallel (each on one thread, so results never depend on the
//! thread count), outputs in sample order.

mod picks;

pub use picks::{picked_among, picked_samples, Decimator};

use crate::formats::data::{Binding, DataError};
use crate::interp::{InterpError, Program, Watch};
use crate::tensor::Tensor;
use std::collections::{HashMap, HashSet};

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Data(#[from] DataError),
    /// The interpreter's error on one sample (held as `error`, not as a `source`, so that a
    /// report of the error chain does not print it twice).
    #[error("sample {sample}: {error}")]
    Interp { sample: usize, error: InterpError },
    /// A key to watch that the program does not compute.
    #[error(transparent)]
    Watch(InterpError),
    #[error("cannot start {threads} worker threads: {reason}")]
    Threads { threads: usize, reason: String },
    #[error("{0}")]
    Output(String),
    /// The caller's [`Tick`] stopped the run (Ctrl-C in Python).
    #[error("{0}")]
    Stopped(String),
}

/// Where a run's samples come from.
pub enum Feed<'a> {
    /// Samples `indices` of a bound data set, read by the worker that runs them (in sample
    /// order on this thread when the data streams from a file).
    Indexed { data: &'a Binding, indices: &'a [usize] },
    /// Samples read in order on this thread, each with its index (its position in the
    /// caller's sequence); the run ends with the stream.
    Stream(&'a mut dyn Iterator<Item = Result<(usize, Vec<Tensor>), DataError>>),
}

impl Feed<'_> {
    /// The number of samples, when known before the run.
    pub fn len(&self) -> Option<usize> {
        match self {
            Feed::Indexed { indices, .. } => Some(indices.len()),
            Feed::Stream(_) => None,
        }
    }
}

/// A hook called on the calling thread after every sample combined with the number run so far
/// and the total (`None` for a stream); an `Err` stops the run with [`RunError::Stopped`].
/// Bindings use it for Ctrl-C and progress callbacks.
pub type Tick = dyn FnMut(usize, Option<usize>) -> Result<(), String> + Send;

thread_local! {
    static TICK: std::cell::RefCell<Option<Box<Tick>>> = const { std::cell::RefCell::new(None) };
}

/// Runs `work` with `tick` called after every sample of every run `work` makes on this thread
/// (calibration, evaluation, `run`), then restores the hook that was there.
pub fn with_tick<R>(tick: Box<Tick>, work: impl FnOnce() -> R) -> R {
    struct Restore(Option<Box<Tick>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let old = self.0.take();
            TICK.with(|t| *t.borrow_mut() = old);
        }
    }
    let _restore = Restore(TICK.with(|t| t.borrow_mut().replace(tick)));
    work()
}

fn tick(done: usize, total: Option<usize>) -> Result<(), RunError> {
    TICK.with(|t| match t.borrow_mut().as_mut() {
        Some(f) => f(done, total).map_err(RunError::Stopped),
        None => Ok(()),
    })
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

/// A counter for a run of unknown length (a stream), nothing when stderr is not a terminal.
pub fn progress_stream(what: &str) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::no_length();
    if let Ok(style) = indicatif::ProgressStyle::with_template("{msg} {pos} samples, {per_sec}") {
        pb.set_style(style);
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

/// A sample to run, by its index: its inputs read on this thread, or a row the worker that
/// runs it reads.
enum Job<'d> {
    Read(usize, Result<Vec<Tensor>, DataError>),
    Row(usize, &'d Binding),
}

impl Job<'_> {
    fn index(&self) -> usize {
        match self {
            Job::Read(i, _) | Job::Row(i, _) => *i,
        }
    }
    fn inputs(self) -> Result<Vec<Tensor>, DataError> {
        match self {
            Job::Read(_, r) => r,
            Job::Row(i, data) => data.sample(i),
        }
    }
}

/// The next sample from `feed`, `pos` samples in. A bound data set read from a stream (lazy
/// `.npz` rows) and a [`Feed::Stream`] are read here, in sample order, so that the decoder
/// never goes back; a stream's error is the job at its place.
fn next_job<'d>(feed: &mut Feed<'d>, pos: usize) -> Option<Job<'d>> {
    match feed {
        Feed::Indexed { data, indices } => {
            let data: &'d Binding = data;
            let &i = indices.get(pos)?;
            Some(match data.streams() {
                true => Job::Read(i, data.sample(i)),
                false => Job::Row(i, data),
            })
        }
        Feed::Stream(items) => Some(match items.next()? {
            Ok((i, inputs)) => Job::Read(i, Ok(inputs)),
            Err(e) => Job::Read(pos, Err(e)),
        }),
    }
}

/// Runs the samples `indices`, `threads` at a time. The watched values of each sample are
/// handed to `observe(sample, key, value)` in sample order, once every sample before it has
/// been, so that observers see the same sequence whatever the thread count. Returns the
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
    let keep = keep_outputs.then_some(&mut outputs);
    run_observing(
        program,
        Feed::Indexed { data, indices },
        threads,
        watch,
        observe,
        keep,
        what,
    )?;
    Ok(outputs)
}

/// The loop of [`run_samples`] and [`run_feed`]: watched values handed to `observe` in sample
/// order, outputs pushed to `outputs` when given; returns the samples run.
fn run_observing(
    program: &Program,
    feed: Feed,
    threads: usize,
    watch: &Watch,
    observe: &mut dyn FnMut(usize, &str, &Tensor) -> Result<(), String>,
    mut outputs: Option<&mut Vec<Vec<Tensor>>>,
    what: &str,
) -> Result<usize, RunError> {
    run_states(
        program,
        feed,
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
            if let Some(o) = outputs.as_mut() {
                o.push(out);
            }
            Ok(())
        },
        what,
    )
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

/// Like [`run_samples`] for reductions, over any [`Feed`]: each worker folds the watched values
/// of one sample into a fresh `S` (`init`, `fold`) as they are computed, and `combine`
/// receives the samples' states in sample order. Memory holds one state per sample in flight
/// instead of every watched tensor, and the result is independent of the thread count when
/// `combine` is an exact merge. Returns the number of samples run.
#[allow(clippy::too_many_arguments)]
pub fn run_samples_fold<S: Send>(
    program: &Program,
    feed: Feed,
    threads: usize,
    watch: &Watch,
    init: &(dyn Fn() -> S + Sync),
    fold: &(dyn Fn(&mut S, usize, &str, &Tensor) -> Result<(), String> + Sync),
    combine: &mut dyn FnMut(usize, S) -> Result<(), String>,
    what: &str,
) -> Result<usize, RunError> {
    run_states(
        program,
        feed,
        threads,
        watch,
        init,
        fold,
        &mut |i, _, state| combine(i, state).map_err(|m| observer_error(i, "", m)),
        what,
    )
}

/// Like [`run_samples`] over any [`Feed`], without keeping outputs; returns the number of
/// samples run.
pub fn run_feed(
    program: &Program,
    feed: Feed,
    threads: usize,
    watch: &Watch,
    observe: &mut dyn FnMut(usize, &str, &Tensor) -> Result<(), String>,
    what: &str,
) -> Result<usize, RunError> {
    run_observing(program, feed, threads, watch, observe, None, what)
}

/// The loop under both: samples run in parallel ([`run_jobs`]), each folding its watched values
/// into its own state; `combine` then sees (sample, outputs, state) in sample order.
/// Returns the number of samples run.
#[allow(clippy::too_many_arguments)]
fn run_states<S: Send>(
    program: &Program,
    feed: Feed,
    threads: usize,
    watch: &Watch,
    init: &(dyn Fn() -> S + Sync),
    fold: &(dyn Fn(&mut S, usize, &str, &Tensor) -> Result<(), String> + Sync),
    combine: &mut dyn FnMut(usize, Vec<Tensor>, S) -> Result<(), RunError>,
    what: &str,
) -> Result<usize, RunError> {
    let run_one = |i: usize, inputs: Vec<Tensor>| {
        let mut state = init();
        let out = program
            .run_observed_owned(inputs, watch, &mut |k, v| fold(&mut state, i, k, v))
            .map_err(|error| RunError::Interp { sample: i, error })?;
        Ok((out, state))
    };
    run_jobs(feed, pool(threads)?, &run_one, combine, what)
}

/// A sample's outcome from a worker of [`run_jobs`]: its place in the run, its index, and its
/// outputs and state (or the panic that stopped it, raised again on the calling thread).
type Outcome<S> = (usize, usize, std::thread::Result<Result<(Vec<Tensor>, S), RunError>>);

/// Samples from `feed`, each run by `run_one(sample, inputs)` on a worker of `pool` as soon as
/// one is free; `combine` sees (sample, outputs, state) in sample order, as each becomes next.
/// At most 2 × the pool's size of samples are read, running or waiting to be combined at once.
/// There is no barrier between groups of samples: a worker that finishes early takes the next
/// sample instead of waiting for the slowest of its group (a per-thread timeline of calibrating
/// a BERT-base encoder on 2 threads showed a core idle for up to a sample's time per group).
/// `feed` is read on this thread, in order. Returns the number of samples run.
fn run_jobs<S: Send>(
    mut feed: Feed,
    pool: rayon::ThreadPool,
    run_one: &(dyn Fn(usize, Vec<Tensor>) -> Result<(Vec<Tensor>, S), RunError> + Sync),
    combine: &mut dyn FnMut(usize, Vec<Tensor>, S) -> Result<(), RunError>,
    what: &str,
) -> Result<usize, RunError> {
    use std::sync::{mpsc, Mutex, PoisonError};
    let total = feed.len();
    let workers = pool.current_num_threads().max(1);
    let window = 2 * workers;
    let pb = match total {
        Some(n) => progress(n, what),
        None => progress_stream(what),
    };
    let (job_tx, job_rx) = mpsc::channel::<(usize, Job)>();
    let (out_tx, out_rx) = mpsc::channel::<Outcome<S>>();
    let job_rx = Mutex::new(job_rx);
    let done = pool.in_place_scope(|scope| -> Result<usize, RunError> {
        for _ in 0..workers {
            let (job_rx, out_tx) = (&job_rx, out_tx.clone());
            scope.spawn(move |_| loop {
                let next = job_rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                let Ok((place, job)) = next else { return };
                let i = job.index();
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    job.inputs()
                        .map_err(RunError::from)
                        .and_then(|inputs| run_one(i, inputs))
                }));
                if out_tx.send((place, i, outcome)).is_err() {
                    return;
                }
            });
        }
        drop(out_tx);
        // every return below drops `job_tx`, which ends the workers once they are idle
        let job_tx = job_tx;
        let (mut taken, mut done, mut more) = (0, 0, true);
        let mut waiting: std::collections::BTreeMap<usize, (usize, _)> = std::collections::BTreeMap::new();
        loop {
            while more && taken < done + window {
                match next_job(&mut feed, taken) {
                    Some(job) => {
                        // a stream's error ends the run at its place: nothing is read after it
                        more = !matches!(job, Job::Read(_, Err(_)));
                        if job_tx.send((taken, job)).is_err() {
                            more = false;
                        }
                        taken += 1;
                    }
                    None => more = false,
                }
            }
            if done == taken {
                return Ok(done);
            }
            let Ok((place, i, outcome)) = out_rx.recv() else {
                return Err(RunError::Output(format!("sample {done}: no worker is left to run it")));
            };
            waiting.insert(place, (i, outcome));
            while let Some((i, outcome)) = waiting.remove(&done) {
                let (out, state) = outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
                combine(i, out, state)?;
                done += 1;
                pb.inc(1);
                tick(done, total)?;
            }
        }
    })?;
    pb.finish_and_clear();
    Ok(done)
}

/// What [`run_side_by_side`] does with the values of one sample: `observe_a` sees every value
/// `a` watches (on `a`'s thread, into its state), `compare` every key of `paired` with `a`'s and
/// `b`'s value (on `b`'s thread, into its state), and `combine` gets, in sample order, both
/// programs' outputs and the two states.
pub struct SideBySide<'f, SA, SB> {
    pub init: &'f (dyn Fn() -> (SA, SB) + Sync),
    pub observe_a: &'f (dyn Fn(&mut SA, &str, &Tensor) -> Result<(), String> + Sync),
    pub compare: &'f (dyn Fn(&mut SB, &str, &Tensor, &Tensor) -> Result<(), String> + Sync),
    pub combine: &'f mut dyn FnMut(usize, [Vec<Tensor>; 2], SA, SB) -> Result<(), RunError>,
}

/// Which of `keys` (one per layer, in layer order) each distinct key is read by, and the
/// distinct keys sorted: what a measurement watches and hands its layers.
pub fn readers<'k>(keys: impl IntoIterator<Item = &'k str>) -> (HashMap<String, Vec<usize>>, Vec<String>) {
    let mut readers: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, k) in keys.into_iter().enumerate() {
        readers.entry(k.to_string()).or_default().push(i);
    }
    let mut keys: Vec<String> = readers.keys().cloned().collect();
    keys.sort();
    (readers, keys)
}

/// [`run_side_by_side`] for a measurement that only compares the values of `keys`, which
/// both programs watch: each sample's state starts as `init()`, `compare` sees every key
/// with `a`'s and `b`'s value, and `combine` gets each sample's state in sample order.
/// Returns the number of samples run.
#[allow(clippy::too_many_arguments)]
pub fn compare_side_by_side<S: Send>(
    [a, b]: [&Program; 2],
    feed: Feed,
    threads: usize,
    keys: &[String],
    init: &(dyn Fn() -> S + Sync),
    compare: &(dyn Fn(&mut S, &str, &Tensor, &Tensor) -> Result<(), String> + Sync),
    combine: &mut dyn FnMut(usize, S) -> Result<(), RunError>,
    what: &str,
) -> Result<usize, RunError> {
    let paired: HashSet<String> = keys.iter().cloned().collect();
    let (watch_a, watch_b) = (
        a.watch(keys).map_err(RunError::Watch)?,
        b.watch(keys).map_err(RunError::Watch)?,
    );
    let mut each = |i: usize, _: [Vec<Tensor>; 2], _: (), s: S| combine(i, s);
    let with = SideBySide {
        init: &|| ((), init()),
        observe_a: &|_, _, _| Ok(()),
        compare,
        combine: &mut each,
    };
    run_side_by_side([a, b], feed, threads, [&watch_a, &watch_b], &paired, with, what)
}

/// At most this many of `a`'s values wait for `b` in [`run_side_by_side`] when the two run on
/// threads of their own.
const AHEAD: usize = 2;

/// Runs programs `a` and `b` (a float model and its quantized form) on the same samples and
/// hands every value both compute under a key of `paired` to `compare`, as soon as `b` has
/// it. With two or more threads, each sample runs `a` on a thread of its own that stays at
/// most [`AHEAD`] values ahead of `b` (threads / 2 samples at a time), so a sample in flight
/// holds a few of `a`'s values rather than all of them; with one thread `a` runs first and
/// its paired values wait for `b`. Per sample, everything is computed in the same order either
/// way, so results do not depend on the thread count. Returns the number of samples run.
#[allow(clippy::too_many_arguments)]
pub fn run_side_by_side<SA: Send, SB: Send>(
    [a, b]: [&Program; 2],
    feed: Feed,
    threads: usize,
    [watch_a, watch_b]: [&Watch; 2],
    paired: &HashSet<String>,
    with: SideBySide<SA, SB>,
    what: &str,
) -> Result<usize, RunError> {
    let SideBySide {
        init,
        observe_a,
        compare,
        combine,
    } = with;
    let threads = match threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let concurrent = threads >= 2;
    // runs `a`, sending its paired values through `send`; false from `send` means `b` is gone
    let run_a = |i: usize, inputs: &[Tensor], sa: &mut SA, send: &dyn Fn(String, Tensor) -> bool| {
        a.run_observed(inputs, watch_a, &mut |k, v| {
            observe_a(sa, k, v)?;
            if paired.contains(k) && !send(k.to_string(), v.clone()) {
                return Err("stopped: the other model's run ended".into());
            }
            Ok(())
        })
        .map_err(|error| RunError::Interp { sample: i, error })
    };
    // runs `b`, taking `a`'s value of each paired key from `rx` (values that come before it
    // wait in `pending`)
    let run_b = |i: usize, inputs: &[Tensor], sb: &mut SB, rx: &std::sync::mpsc::Receiver<(String, Tensor)>| {
        let mut pending: HashMap<String, Tensor> = HashMap::new();
        let mut a_done = false;
        b.run_observed(inputs, watch_b, &mut |k, vb| {
            if !paired.contains(k) {
                return Ok(());
            }
            let mut va = pending.remove(k);
            while va.is_none() && !a_done {
                match rx.recv() {
                    Ok((key, v)) if key == k => va = Some(v),
                    Ok((key, v)) => {
                        pending.insert(key, v);
                    }
                    Err(_) => a_done = true,
                }
            }
            match va {
                Some(va) => compare(sb, k, &va, vb),
                None => Ok(()),
            }
        })
        .map_err(|error| RunError::Interp { sample: i, error })
    };
    let run_one = |i: usize, inputs: Vec<Tensor>| -> Result<(Vec<Tensor>, (Vec<Tensor>, SA, SB)), RunError> {
        let (mut sa, mut sb) = init();
        let (out_a, out_b) = if concurrent {
            let (tx, rx) = std::sync::mpsc::sync_channel(AHEAD);
            std::thread::scope(|s| {
                let thread_a = s.spawn(|| {
                    let out = run_a(i, &inputs, &mut sa, &|k, v| tx.send((k, v)).is_ok());
                    drop(tx);
                    out
                });
                let out_b = run_b(i, &inputs, &mut sb, &rx);
                drop(rx);
                let out_a = thread_a.join().unwrap_or_else(|_| {
                    Err(RunError::Output(format!(
                        "sample {i}: the run of the first model panicked (a bug in quantir)"
                    )))
                });
                (out_a, out_b)
            })
        } else {
            let (tx, rx) = std::sync::mpsc::channel();
            let out_a = run_a(i, &inputs, &mut sa, &|k, v| tx.send((k, v)).is_ok());
            drop(tx);
            (out_a, run_b(i, &inputs, &mut sb, &rx))
        };
        // `b`'s own error first: `a` may only have stopped because `b` did
        let out_b = out_b?;
        Ok((out_a?, (out_b, sa, sb)))
    };
    let pool = pool((threads / 2).max(1))?;
    run_jobs(
        feed,
        pool,
        &run_one,
        &mut |i, out_a, (out_b, sa, sb)| combine(i, [out_a, out_b], sa, sb),
        what,
    )
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
                crate::interp::kernels::join::concat(&col, 0)
            } else {
                crate::interp::kernels::join::pack(&col, 0)
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

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// `n` samples as a stream, each with no inputs.
    fn stream(n: usize) -> impl Iterator<Item = Result<(usize, Vec<Tensor>), DataError>> {
        (0..n).map(|i| Ok((i, Vec::new())))
    }

    /// [`run_jobs`] over `n` samples of a stream, on 2 workers.
    fn run_stream<S: Send>(
        n: usize,
        run_one: &(dyn Fn(usize, Vec<Tensor>) -> Result<(Vec<Tensor>, S), RunError> + Sync),
        combine: &mut dyn FnMut(usize, Vec<Tensor>, S) -> Result<(), RunError>,
    ) -> Result<usize, RunError> {
        let mut items = stream(n);
        run_jobs(Feed::Stream(&mut items), pool(2).unwrap(), run_one, combine, "test")
    }

    #[test]
    fn samples_are_combined_in_order_however_their_runs_end() {
        let (started, combined) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let most_ahead = AtomicUsize::new(0);
        // later samples finish first: sample i sleeps (12 − i) ms
        let run_one = |i: usize, _: Vec<Tensor>| {
            let ahead = started.fetch_add(1, Ordering::SeqCst) + 1 - combined.load(Ordering::SeqCst);
            most_ahead.fetch_max(ahead, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(12 - i as u64));
            Ok((Vec::new(), i * 10))
        };
        let mut seen = Vec::new();
        let n = run_stream(12, &run_one, &mut |i, _, state| {
            seen.push((i, state));
            combined.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 12);
        assert_eq!(seen, (0..12).map(|i| (i, i * 10)).collect::<Vec<_>>());
        // never more than 2 × 2 workers' samples run or wait at once
        assert!(most_ahead.load(Ordering::SeqCst) <= 4, "{most_ahead:?}");
    }

    #[test]
    fn an_error_ends_the_run_at_its_sample() {
        let run_one = |i: usize, _: Vec<Tensor>| match i {
            5 => Err(RunError::Output("sample 5 fails".into())),
            _ => Ok((Vec::new(), i)),
        };
        let mut seen = Vec::new();
        let err = run_stream(12, &run_one, &mut |i, _, _| {
            seen.push(i);
            Ok(())
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "sample 5 fails");
        assert_eq!(seen, vec![0, 1, 2, 3, 4]);
        // a stream's read error ends it at its place, nothing after it is read
        let mut reads = 0;
        let mut failing = (0..12).map(|i| {
            reads += 1;
            match i {
                3 => Err(DataError::Read {
                    path: "rows.npz".into(),
                    reason: "row 3 is bad".into(),
                }),
                _ => Ok((i, Vec::new())),
            }
        });
        let err = run_jobs(
            Feed::Stream(&mut failing),
            pool(2).unwrap(),
            &|i, _| Ok((Vec::new(), i)),
            &mut |_, _, _| Ok(()),
            "test",
        )
        .unwrap_err();
        drop(failing);
        assert!(err.to_string().contains("row 3 is bad"), "{err}");
        assert_eq!(reads, 4);
    }

    #[test]
    fn a_panic_on_a_worker_reaches_the_caller() {
        let run_one = |i: usize, _: Vec<Tensor>| -> Result<(Vec<Tensor>, ()), RunError> {
            if i == 2 {
                panic!("a bug on sample 2");
            }
            Ok((Vec::new(), ()))
        };
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_stream(8, &run_one, &mut |_, _, _| Ok(()))
        }));
        let panic = caught.expect_err("the worker's panic is raised again");
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"a bug on sample 2"));
    }
}
