//! [`Observer`]: the statistics of one tensor for one [`Method`].

use crate::histogram::{Histogram, DEFAULT_BINS};
use crate::minmax::{first_non_finite, MinMax, MovingAverage, MovingAverageMinMax, PerChannelMinMax};
use crate::{select, CalibError, Range};
use ndarray::ArrayViewD;
use serde::{Deserialize, Serialize};

/// How a quantization range is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "method", rename_all = "kebab-case")]
pub enum Method {
    /// Global min and max.
    MinMax,
    /// TF AVERAGE_MIN_MAX: mean of per-batch min and max.
    AvgMinMax,
    /// onnxruntime / PyTorch moving average: range += c · (batch range − range).
    EmaMinMax { constant: f32 },
    /// Percentile of a histogram; symmetric = on |x| (onnxruntime's default).
    Percentile { percentile: f64, symmetric: bool },
    /// Minimum KL divergence on |x| with `levels` quantized bins (128 for int8).
    Entropy { levels: usize },
    /// Minimum expected squared quantization error for a `bits`-bit grid.
    Mse { bits: u32, symmetric: bool },
}

impl Method {
    pub fn uses_histogram(&self) -> bool {
        matches!(
            self,
            Method::Percentile { .. } | Method::Entropy { .. } | Method::Mse { .. }
        )
    }

    /// A method by its CLI name, with the defaults of the tools users know.
    pub fn from_name(name: &str, percentile: Option<f64>) -> Result<Method, CalibError> {
        Ok(match name {
            "minmax" => Method::MinMax,
            "avg-minmax" => Method::AvgMinMax,
            "ema-minmax" => Method::EmaMinMax { constant: 0.01 },
            "percentile" => Method::Percentile { percentile: percentile.unwrap_or(99.999), symmetric: false },
            "percentile-symmetric" => Method::Percentile { percentile: percentile.unwrap_or(99.999), symmetric: true },
            "entropy" => Method::Entropy { levels: 128 },
            "mse" => Method::Mse { bits: 8, symmetric: false },
            "mse-symmetric" => Method::Mse { bits: 8, symmetric: true },
            _ => {
                return Err(CalibError::Invalid(format!(
                    "unknown calibration method '{name}' (expected minmax, avg-minmax, ema-minmax, percentile, percentile-symmetric, entropy, mse, mse-symmetric)"
                )))
            }
        })
    }
}

/// What to do with NaN and ±Inf in observed tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NonFinitePolicy {
    /// Reject the batch (nothing of it is recorded).
    #[default]
    Error,
    /// Leave them out and count them.
    Skip,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum State {
    MinMax(MinMax),
    Moving(MovingAverageMinMax),
    Histogram(Histogram),
    PerChannel(PerChannelMinMax),
}

/// One tensor's statistics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observer {
    pub method: Method,
    pub non_finite: NonFinitePolicy,
    pub skipped_non_finite: u64,
    pub batches: u64,
    pub state: State,
}

impl Observer {
    /// A per-tensor observer for `method` (`bins` is used by histogram methods).
    pub fn new(method: Method, bins: usize, non_finite: NonFinitePolicy) -> Self {
        let state = match method {
            Method::MinMax => State::MinMax(MinMax::default()),
            Method::AvgMinMax => State::Moving(MovingAverageMinMax::new(MovingAverage::Mean)),
            Method::EmaMinMax { constant } => State::Moving(MovingAverageMinMax::new(MovingAverage::Ema { constant })),
            _ => State::Histogram(Histogram::new(if bins == 0 { DEFAULT_BINS } else { bins })),
        };
        Observer {
            method,
            non_finite,
            skipped_non_finite: 0,
            batches: 0,
            state,
        }
    }

    /// A per-channel min/max observer along `axis` (weights, per-channel activations).
    pub fn per_channel(axis: usize, non_finite: NonFinitePolicy) -> Self {
        Observer {
            method: Method::MinMax,
            non_finite,
            skipped_non_finite: 0,
            batches: 0,
            state: State::PerChannel(PerChannelMinMax::new(axis)),
        }
    }

    /// Observes one batch. With [`NonFinitePolicy::Error`] a batch holding NaN or ±Inf is
    /// rejected whole and the error says how many and where the first is.
    pub fn observe(&mut self, x: &ArrayViewD<f32>) -> Result<(), ObserveError> {
        self.observe_sample(x, self.batches as usize)
    }

    /// [`Self::observe`] for the data's sample `sample` (a per-channel observer counts it in
    /// the half its parity names, whatever order samples come in).
    pub fn observe_sample(&mut self, x: &ArrayViewD<f32>, sample: usize) -> Result<(), ObserveError> {
        let x = x.as_standard_layout();
        let xs = x.as_slice().unwrap_or(&[]);
        if self.non_finite == NonFinitePolicy::Error {
            let (_, _, bad) = crate::minmax::batch_min_max(xs);
            if bad > 0 {
                return Err(ObserveError::NonFinite {
                    count: bad,
                    first_index: first_non_finite(xs),
                });
            }
        }
        let bad = match &mut self.state {
            State::MinMax(m) => m.observe_slice(xs),
            State::Moving(m) => m.observe_slice(xs),
            State::Histogram(h) => h.observe_slice(xs),
            State::PerChannel(p) => p.observe(&x.view(), sample).map_err(ObserveError::Other)?,
        };
        self.skipped_non_finite += bad as u64;
        self.batches += 1;
        Ok(())
    }

    pub fn merge(&mut self, o: &Observer) -> Result<(), CalibError> {
        if self.method != o.method {
            return Err(CalibError::Mismatch(format!(
                "methods {:?} and {:?}",
                self.method, o.method
            )));
        }
        match (&mut self.state, &o.state) {
            (State::MinMax(a), State::MinMax(b)) => a.merge(b),
            (State::Moving(a), State::Moving(b)) => a.merge(b)?,
            (State::Histogram(a), State::Histogram(b)) => a.merge(b)?,
            (State::PerChannel(a), State::PerChannel(b)) => a.merge(b)?,
            _ => return Err(CalibError::Mismatch("observers of different kinds".into())),
        }
        self.skipped_non_finite += o.skipped_non_finite;
        self.batches += o.batches;
        Ok(())
    }

    /// Observed extremes of the finite values.
    pub fn min_max(&self) -> Option<Range> {
        match &self.state {
            State::MinMax(m) => m.range(),
            State::Moving(m) => m.range(),
            State::Histogram(h) => (!h.is_empty()).then(|| (h.min(), h.max())),
            State::PerChannel(p) => {
                let (lo, hi) = p.ranges();
                let l = lo.iter().copied().fold(f32::INFINITY, f32::min);
                let h = hi.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                (!p.channels.is_empty()).then_some((l, h))
            }
        }
    }

    /// The range the method chooses (per-tensor).
    pub fn range(&self) -> Option<Range> {
        match (&self.state, self.method) {
            (
                State::Histogram(h),
                Method::Percentile {
                    percentile,
                    symmetric: true,
                },
            ) => select::percentile_symmetric(h, percentile),
            (
                State::Histogram(h),
                Method::Percentile {
                    percentile,
                    symmetric: false,
                },
            ) => select::percentile(h, percentile),
            (State::Histogram(h), Method::Entropy { levels }) => select::entropy(h, levels),
            (State::Histogram(h), Method::Mse { bits, symmetric }) => select::mse(h, bits, symmetric),
            _ => self.min_max(),
        }
    }

    /// (mins, maxs) per channel, for a per-channel observer.
    pub fn channel_ranges(&self) -> Option<(Vec<f32>, Vec<f32>)> {
        match &self.state {
            State::PerChannel(p) => Some(p.ranges()),
            _ => None,
        }
    }

    /// How far each channel is expected to reach on samples not yet seen
    /// ([`PerChannelMinMax::reach`]), for a per-channel observer.
    pub fn channel_reach(&self) -> Option<(Vec<f32>, Vec<f32>)> {
        match &self.state {
            State::PerChannel(p) => Some(p.reach()),
            _ => None,
        }
    }

    /// Bytes of state (for checking that memory does not grow with the data).
    pub fn state_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + match &self.state {
                State::Histogram(h) => h.state_bytes(),
                State::PerChannel(p) => {
                    (p.channels.capacity() + p.halves.iter().map(Vec::capacity).sum::<usize>())
                        * std::mem::size_of::<MinMax>()
                }
                _ => 0,
            }
    }
}

/// Why a batch was rejected.
#[derive(Debug, Clone, PartialEq)]
pub enum ObserveError {
    /// `count` non-finite values, the first at flat index `first_index`.
    NonFinite {
        count: usize,
        first_index: usize,
    },
    Other(CalibError),
}
