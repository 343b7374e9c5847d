//! quantir-calibration: streaming, mergeable statistics from which quantization ranges are
//! chosen. ndarray + serde only; no MLIR.
//!
//! - [`MinMax`], [`MovingAverageMinMax`] (TF's mean of per-batch extremes, or the
//!   onnxruntime/PyTorch EMA), [`PerChannelMinMax`];
//! - [`Histogram`]: fixed memory, power-of-two bin widths on a grid aligned to 0, so that grids
//!   nest: coarsening is exact, results do not depend on how data is batched or sharded, and
//!   merging is exact, associative and commutative;
//! - range selection from a histogram ([`select`]): percentile (two-sided or symmetric),
//!   entropy (minimum KL divergence, O(bins · levels) with prefix sums) and MSE (expected
//!   squared quantization error, O(1) per candidate with prefix sums);
//! - [`Observer`]: one tensor's statistics for a [`Method`]; [`StatsFile`]: the versioned,
//!   mergeable document of a calibration run.

mod histogram;
mod minmax;
mod observer;
pub mod select;
mod stats;

pub use histogram::Histogram;
pub use minmax::{batch_min_max, MinMax, MovingAverage, MovingAverageMinMax, PerChannelMinMax};
pub use observer::{Method, NonFinitePolicy, ObserveError, Observer, State};
pub use stats::{ChannelMoments, StatsFile, TensorStats, FORMAT_VERSION};

/// Errors of the calibration crate; each names what it is about.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CalibError {
    #[error("tensor '{key}', sample {sample}: {count} non-finite value(s) (NaN or ±Inf), first at flat index {first_index}; pass the skip-non-finite option to ignore them")]
    NonFinite {
        key: String,
        sample: usize,
        count: usize,
        first_index: usize,
    },
    #[error("{0} non-finite value(s) in a batch")]
    NonFiniteInBatch(usize),
    #[error("cannot merge statistics: {0}")]
    Mismatch(String),
    #[error("tensor '{key}': no finite value was observed")]
    Empty { key: String },
    #[error("per-channel axis {axis} is out of range for a tensor of rank {rank}")]
    BadAxis { axis: usize, rank: usize },
    #[error("stats file: {0}")]
    Format(String),
    #[error("{0}")]
    Invalid(String),
}

/// A range [min, max] chosen for quantization.
pub type Range = (f32, f32);
