//! Calibration: runs the prepared float model over samples and streams the statistics of every
//! activation the plan will quantize into a [`StatsFile`].

use super::cache::{self, hash_data, Fnv};
use super::{model_hash, plan, prepare_with, QuantConfig};
use crate::calibration::{ChannelMoments, Method, NonFinitePolicy, PerChannelMinMax, StatsFile};
use crate::formats::data::{Binding, DataError, Fingerprint};
use crate::interp::Program;
use crate::run::{picked_samples, run_feed, run_samples_fold, Feed, RunError};
use crate::tensor::Tensor;
use melior::ir::Module;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Clone)]
pub struct CalibrateOptions {
    pub method: Method,
    pub bins: usize,
    pub threads: usize,
    pub limit: Option<usize>,
    /// Calibrate samples i, i + n, i + 2n, ... (shard i of n).
    pub shard: Option<(usize, usize)>,
    pub non_finite: NonFinitePolicy,
    pub config: QuantConfig,
}

impl Default for CalibrateOptions {
    fn default() -> Self {
        CalibrateOptions {
            method: Method::MinMax,
            bins: 2048,
            threads: 0,
            limit: None,
            shard: None,
            non_finite: NonFinitePolicy::Error,
            config: QuantConfig::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    #[error(transparent)]
    Ir(#[from] crate::ir::IrError),
    #[error(transparent)]
    Pass(#[from] crate::passes::PassError),
    #[error(transparent)]
    Interp(#[from] crate::interp::InterpError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Calib(#[from] crate::calibration::CalibError),
    #[error("shard {0}/{1} is not valid (expected 0 ≤ I < N)")]
    Shard(usize, usize),
    #[error("the model has no tensor to calibrate: {0}")]
    NothingToCalibrate(String),
    #[error("no samples to calibrate on")]
    NoSamples,
}

/// The sample indices of a run: the samples `--limit` picks ([`picked_samples`]), then every
/// k-th of them from the i-th (shard i of k).
pub fn sample_indices(
    total: usize,
    limit: Option<usize>,
    shard: Option<(usize, usize)>,
) -> Result<Vec<usize>, CalibrateError> {
    let picked = picked_samples(total, limit, false);
    match shard {
        None => Ok(picked),
        Some((i, k)) if k > 0 && i < k => Ok(picked.into_iter().skip(i).step_by(k).collect()),
        Some((i, k)) => Err(CalibrateError::Shard(i, k)),
    }
}

/// What a calibration run observes on a prepared module.
struct Observation {
    hash: String,
    keys: Vec<String>,
    methods: BTreeMap<String, Method>,
    /// Keys observed per channel, and their channel axis.
    axes: BTreeMap<String, usize>,
}

fn observation(module: &Module, opts: &CalibrateOptions) -> Result<Observation, CalibrateError> {
    let hash = model_hash(module);
    // every point a quantize option that leaves the graph alone may ask for, the model's
    // outputs included (--quantize-outputs), so that one stats file serves them all
    let every_point = crate::recipe::QuantConfig {
        quantize_outputs: true,
        ..opts.config.clone()
    };
    let plan = plan(module, None, &every_point)?;
    let keys = plan.calibrated_keys();
    if keys.is_empty() {
        return Err(CalibrateError::NothingToCalibrate(why_nothing(module, &opts.config)));
    }
    let mut methods = BTreeMap::new();
    for p in plan.activations.iter().filter(|p| p.same_as.is_none()) {
        if let Some((name, pct)) = &p.method {
            let m = Method::from_name(name, *pct)?;
            if m != opts.method {
                methods.insert(p.key.clone(), m);
            }
        }
    }
    // per channel only under min/max: a per-channel observer keeps extremes, and a point whose
    // method reads a histogram (percentile, MSE, entropy) keeps its one range from it
    let axes = plan
        .channel_axes()
        .into_iter()
        .filter(|(k, _)| methods.get(k).copied().unwrap_or(opts.method) == Method::MinMax)
        .collect();
    Ok(Observation {
        hash,
        keys,
        methods,
        axes,
    })
}

/// Why a plan has no point to calibrate: no compute op the tables know, activations left
/// float, or every compute op left float by the recipe.
fn why_nothing(module: &Module, config: &QuantConfig) -> String {
    use crate::ir::graph::{body_ops, functions, op_name};
    let compute = functions(module)
        .into_iter()
        .flat_map(body_ops)
        .filter(|op| crate::dialects::rule(&op_name(op)).is_some_and(|r| r.is_compute()))
        .count();
    if compute == 0 {
        "no quantizable op the dialect tables know".into()
    } else if config.activations.is_none() {
        "activations are left float (activations none); quantize weight-only without calibrating".into()
    } else {
        format!("all {compute} compute ops are left float (--exclude / the recipe)")
    }
}

/// Calibration samples the equalization ranges are measured on (the data's first).
pub const EQUALIZE_SAMPLES: usize = 32;

/// Prepares `module` (in place) as `opts.config` asks. With cross-layer equalization by
/// activations, the per-channel moments of every value the pass balances are measured on
/// `feed` first (float, before equalization, in sample order whatever the thread count) and
/// handed to it; returns them, for the statistics (empty when equalizing by weights).
fn equalize(
    module: &Module,
    opts: &CalibrateOptions,
    feed: Feed,
) -> Result<Option<BTreeMap<String, ChannelMoments>>, CalibrateError> {
    if !opts.config.equalize_layers {
        prepare_with(module, &opts.config)?;
        return Ok(None);
    }
    super::prepare(module)?;
    let points: BTreeMap<String, usize> = crate::passes::equalize_layers::range_points(module)
        .into_iter()
        .collect();
    // per key: the channels' sums of squares, the elements per channel, and their extremes
    // (over all samples, and over the even- and the odd-numbered ones for their reach)
    let mut acc: BTreeMap<String, (Vec<f64>, f64, PerChannelMinMax)> = BTreeMap::new();
    if !points.is_empty() && opts.config.equalize_by == crate::recipe::EqualizeBy::Activations {
        let program = Program::compile(module, None)?;
        let keys: Vec<String> = points.keys().cloned().collect();
        let watch = program.watch(&keys)?;
        run_feed(
            &program,
            feed,
            opts.threads,
            &watch,
            &mut |sample, key, t| {
                let (Some(&axis), Tensor::F32(a)) = (points.get(key), t) else {
                    return Ok(());
                };
                let (sq, n, extremes) = acc
                    .entry(key.to_string())
                    .or_insert_with(|| (Vec::new(), 0.0, PerChannelMinMax::new(axis)));
                extremes.observe(&a.view(), sample).map_err(|e| e.to_string())?;
                let c = a.shape()[axis];
                if sq.is_empty() {
                    *sq = vec![0.0; c];
                }
                for (c, lane) in a.axis_iter(ndarray::Axis(axis)).enumerate() {
                    for &v in lane.iter().filter(|v| v.is_finite()) {
                        sq[c] += v as f64 * v as f64;
                    }
                }
                *n += (a.len() / c.max(1)) as f64;
                Ok(())
            },
            "equalize",
        )?;
    }
    let ranges: BTreeMap<String, ChannelMoments> = acc
        .into_iter()
        .map(|(k, (sq, n, extremes))| {
            // the extremes with 0 held, as the ranges quantization derives from them hold it
            let (lo, hi) = extremes.ranges();
            let (reach_min, reach_max) = extremes.reach();
            let moments = ChannelMoments {
                min: lo.iter().map(|v| v.min(0.0)).collect(),
                max: hi.iter().map(|v| v.max(0.0)).collect(),
                mean_square: sq.iter().map(|s| (s / n.max(1.0)) as f32).collect(),
                reach_min,
                reach_max,
            };
            (k, moments)
        })
        .collect();
    let config = crate::recipe::QuantConfig {
        equalize_ranges: ranges.clone(),
        ..opts.config.clone()
    };
    prepare_with(module, &config)?;
    Ok(Some(ranges))
}

/// Prepares `module` (in place), runs it over the samples and returns the statistics.
pub fn calibrate(module: &Module, data: &Binding, opts: &CalibrateOptions) -> Result<StatsFile, CalibrateError> {
    Ok(calibrate_cached(module, data, opts, None)?.stats)
}

/// Resolves the module's untyped results from the data's first sample (every shard resolves
/// from the same sample, so shards merge). Returns the first sample's shapes when the types
/// needed them or the inputs have dynamic dims (`None` otherwise) and, when results stay
/// untyped, a warning saying how many and why.
pub fn resolve_from(
    module: &Module,
    data: &Binding,
) -> Result<(Option<Vec<Vec<usize>>>, Option<String>), CalibrateError> {
    if super::untyped_results(module) == 0 {
        // typed without data, but with dynamic input dims: the first sample's shapes are what
        // the model computes on (quantize counts its MACs at them)
        if !super::has_dynamic_inputs(module) {
            return Ok((None, None));
        }
        let shapes = super::first_sample_shapes(data).map_err(|e| CalibrateError::Run(RunError::Data(e)))?;
        return Ok((shapes, None));
    }
    let resolved = super::resolve_types_from(module, data).map_err(|e| CalibrateError::Run(RunError::Data(e)))?;
    let Some(super::SampleTypes { shapes, outcome }) = resolved else {
        return Ok((None, None));
    };
    Ok((Some(shapes), unresolved_warning(&outcome)))
}

/// Says how many values stay untyped (float) after resolving from the first sample, and why.
fn unresolved_warning(outcome: &crate::interp::infer_types::Inferred) -> Option<String> {
    (outcome.unknown > 0).then(|| {
        format!(
            "types of {} values unknown after running the model on zeros shaped like the first sample ({}): \
             they stay float",
            outcome.unknown,
            outcome.failure.as_deref().unwrap_or("not reached")
        )
    })
}

/// Statistics and where they came from.
#[derive(Debug)]
pub struct Calibrated {
    pub stats: StatsFile,
    /// The cache entry's key when the statistics were read from the cache.
    pub from_cache: Option<String>,
    /// Why the statistics could not be stored (the job itself succeeded).
    pub cache_warning: Option<String>,
    /// Values whose type the data could not resolve either (they stay float), and why.
    pub type_warning: Option<String>,
}

/// [`calibrate`] through the cache in `cache_dir` (see [`cache`](super::cache)); `None`
/// calibrates without reading or writing the cache.
pub fn calibrate_cached(
    module: &Module,
    data: &Binding,
    opts: &CalibrateOptions,
    cache_dir: Option<&Path>,
) -> Result<Calibrated, CalibrateError> {
    let (shapes, type_warning) = resolve_from(module, data)?;
    // equalization ranges from the data's first samples, whatever the shard, so that shards
    // equalize alike and merge
    let first: Vec<usize> = (0..data.samples.min(EQUALIZE_SAMPLES)).collect();
    let equalization = equalize(module, opts, Feed::Indexed { data, indices: &first })?;
    let obs = observation(module, opts)?;
    let indices = sample_indices(data.samples, opts.limit, opts.shard)?;
    let feed = Feed::Indexed {
        data,
        indices: &indices,
    };
    // arrays in memory (from Python) have no file that could change
    let fingerprint = match data.path.exists() {
        true => Some(Fingerprint::of(&data.path).map_err(|e| read_error(data, e))?),
        false => None,
    };
    let observe = move |obs| -> Result<StatsFile, CalibrateError> {
        let stats = run_observation(module, feed, opts, obs)?;
        if let Some(f) = &fingerprint {
            f.check(&data.path).map_err(RunError::Data)?;
        }
        Ok(stats)
    };
    let Some(dir) = cache_dir else {
        let mut stats = observe(obs)?;
        stats.input_shapes = shapes;
        stats.equalization = equalization;
        return Ok(Calibrated {
            stats,
            from_cache: None,
            cache_warning: None,
            type_warning,
        });
    };
    let mut h = Fnv::default();
    // what the statistics hold, so that entries of an older layout are recalibrated rather
    // than read with a field missing (per-channel halves: 2)
    h.field("stats layout 2");
    h.field(&obs.hash);
    for k in &obs.keys {
        h.field(k);
    }
    h.field(&format!(
        "{:?}|{:?}|{:?}|{}|{:?}|{:?}|{:?}",
        obs.methods, obs.axes, opts.method, opts.bins, opts.non_finite, opts.limit, opts.shard
    ));
    hash_data(&mut h, data).map_err(|e| read_error(data, e))?;
    let key = h.hex();
    // a damaged entry (or one of another model under the same key) is never used: it is
    // named, recalibrated and replaced
    let damaged = match cache::load(dir, &key) {
        Ok(Some(stats)) if stats.model_hash == obs.hash => {
            return Ok(Calibrated {
                stats,
                from_cache: Some(key),
                cache_warning: None,
                type_warning,
            })
        }
        Ok(Some(_)) => Some(format!(
            "{}: statistics of another model, ignored",
            cache::entry(dir, &key).display()
        )),
        Ok(None) => None,
        Err(e) => Some(format!("{e}, ignored")),
    };
    let mut stats = observe(obs)?;
    stats.input_shapes = shapes;
    stats.equalization = equalization;
    let stored = cache::store(dir, &key, &stats).err();
    let cache_warning = match (damaged, stored) {
        (None, None) => None,
        (a, b) => Some(a.into_iter().chain(b).collect::<Vec<_>>().join("; ")),
    };
    Ok(Calibrated {
        stats,
        from_cache: None,
        cache_warning,
        type_warning,
    })
}

fn read_error(data: &Binding, e: std::io::Error) -> CalibrateError {
    CalibrateError::Run(RunError::Data(crate::formats::data::DataError::Read {
        path: data.path.clone(),
        reason: e.to_string(),
    }))
}

/// [`calibrate`] on samples read in order from a stream (a Python generator): the same
/// statistics as [`calibrate`] on a data set holding the same samples, with `opts.limit` and
/// `opts.shard` counted over the stream. The first sample resolves untyped results, as the
/// data set's first would; no cache (a stream has no file to key it by).
pub fn calibrate_stream(
    module: &Module,
    samples: &mut dyn Iterator<Item = Result<Vec<Tensor>, DataError>>,
    opts: &CalibrateOptions,
) -> Result<Calibrated, CalibrateError> {
    if let Some((i, k)) = opts.shard.filter(|&(i, k)| k == 0 || i >= k) {
        return Err(CalibrateError::Shard(i, k));
    }
    let Some(first) = samples.next().transpose().map_err(RunError::Data)? else {
        return Err(CalibrateError::NoSamples);
    };
    let mut type_warning = None;
    let mut shapes = None;
    if super::untyped_results(module) > 0 {
        let s: Vec<Vec<usize>> = first.iter().map(|t| t.shape().to_vec()).collect();
        let outcome = super::resolve_types(module, &s);
        type_warning = unresolved_warning(&outcome);
        shapes = Some(s);
    }
    // a stream is read once: its first sample alone measures the equalization ranges
    let mut only_first = std::iter::once(Ok((0, first.clone())));
    let equalization = equalize(module, opts, Feed::Stream(&mut only_first))?;
    let obs = observation(module, opts)?;
    let (i0, every) = opts.shard.unwrap_or((0, 1));
    let mut picked = std::iter::once(Ok(first))
        .chain(samples)
        .take(opts.limit.unwrap_or(usize::MAX))
        .enumerate()
        .filter(|(i, _)| i % every == i0)
        .map(|(i, r)| r.map(|inputs| (i, inputs)));
    let mut stats = run_observation(module, Feed::Stream(&mut picked), opts, obs)?;
    stats.input_shapes = shapes;
    stats.equalization = equalization;
    Ok(Calibrated {
        stats,
        from_cache: None,
        cache_warning: None,
        type_warning,
    })
}

fn run_observation(
    module: &Module,
    feed: Feed,
    opts: &CalibrateOptions,
    obs: Observation,
) -> Result<StatsFile, CalibrateError> {
    let program = Program::compile(module, None)?;
    let watch = program.watch(&obs.keys)?;
    let mut stats = StatsFile::new(obs.hash, opts.method, opts.bins, opts.non_finite);
    stats.method_overrides = obs.methods;
    let axes = obs.axes;
    let mut first_error = None;
    let mergeable = |m: &Method| !matches!(m, Method::EmaMinMax { .. });
    let ran = if mergeable(&opts.method) && stats.method_overrides.values().all(mergeable) {
        // each sample's statistics are gathered where it runs and merged in sample order
        // (exact), so memory holds small per-sample states, not every watched activation
        struct Partial {
            stats: StatsFile,
            error: Option<crate::calibration::CalibError>,
        }
        let empty = stats.clone();
        run_samples_fold(
            &program,
            feed,
            opts.threads,
            &watch,
            &|| Partial {
                stats: empty.clone(),
                error: None,
            },
            &|p: &mut Partial, sample, key, value: &Tensor| {
                if let (Tensor::F32(a), None) = (value, &p.error) {
                    if let Err(e) = p.stats.observe(key, sample, &a.view(), axes.get(key).copied()) {
                        p.error = Some(e);
                    }
                }
                Ok(())
            },
            &mut |_, p: Partial| {
                if let Some(e) = p.error {
                    let msg = e.to_string();
                    first_error.get_or_insert(e);
                    return Err(msg);
                }
                stats.absorb(&p.stats).map_err(|e| e.to_string())
            },
            "calibrate",
        )
    } else {
        // order-dependent observers (exponential moving averages) see every value in order
        run_feed(
            &program,
            feed,
            opts.threads,
            &watch,
            &mut |sample, key, value: &Tensor| {
                let Tensor::F32(a) = value else { return Ok(()) };
                if let Err(e) = stats.observe(key, sample, &a.view(), axes.get(key).copied()) {
                    let msg = e.to_string();
                    first_error.get_or_insert(e);
                    return Err(msg);
                }
                Ok(())
            },
            "calibrate",
        )
    };
    let ran = ran.map_err(|e| match first_error.take() {
        Some(c) => CalibrateError::Calib(c),
        None => CalibrateError::Run(e),
    })?;
    if ran == 0 {
        return Err(CalibrateError::NoSamples);
    }
    stats.num_samples = ran as u64;
    stats.finalize()?;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_split_the_samples_the_limit_picks() {
        assert_eq!(sample_indices(10, None, None).unwrap(), (0..10).collect::<Vec<_>>());
        assert_eq!(sample_indices(10, Some(4), None).unwrap(), vec![0, 1, 2, 3]);
        // shard i of k: every k-th of the picked samples from the i-th; together, all of them once
        assert_eq!(sample_indices(10, Some(7), Some((0, 3))).unwrap(), vec![0, 3, 6]);
        assert_eq!(sample_indices(10, Some(7), Some((1, 3))).unwrap(), vec![1, 4]);
        assert_eq!(sample_indices(10, Some(7), Some((2, 3))).unwrap(), vec![2, 5]);
        assert_eq!(sample_indices(3, Some(16), Some((1, 2))).unwrap(), vec![1]);
        assert!(sample_indices(2, None, Some((2, 5))).unwrap().is_empty());
        assert!(matches!(
            sample_indices(10, None, Some((3, 3))),
            Err(CalibrateError::Shard(3, 3))
        ));
        assert!(matches!(
            sample_indices(10, None, Some((0, 0))),
            Err(CalibrateError::Shard(0, 0))
        ));
    }
}
