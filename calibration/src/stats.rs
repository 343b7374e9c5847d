//! The stats file: a versioned JSON document with the statistics of every observed tensor.

use crate::observer::ObserveError;
use crate::{CalibError, Method, NonFinitePolicy, Observer, Range};
use ndarray::ArrayViewD;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Bumped whenever the document's meaning changes; older files are refused, not guessed at.
/// 2: `model_hash` is quantir's XXH3-64 module identity (1: FNV-1a, which a file of version 1
/// still holds and no longer matches).
pub const FORMAT_VERSION: u32 = 2;

/// One tensor's statistics and the range chosen from them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorStats {
    /// Observed extremes of the finite values.
    pub min: f32,
    pub max: f32,
    /// The range the method chose.
    pub range: Range,
    /// Per-channel minima and maxima, for per-channel observers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_min: Option<Vec<f32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_max: Option<Vec<f32>>,
    /// Per-channel (min, max) that samples not yet seen are expected to reach
    /// ([`crate::PerChannelMinMax::reach`]): what a per-channel range will clip is judged by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_reach: Option<(Vec<f32>, Vec<f32>)>,
    /// The observer's full state (histogram included), so that shards can be merged.
    pub observer: Observer,
}

/// Statistics of a calibration run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatsFile {
    pub format_version: u32,
    /// Identity of the model the keys belong to (a hash of the module as calibrated).
    pub model_hash: String,
    pub method: Method,
    pub bins: usize,
    pub non_finite: NonFinitePolicy,
    pub num_samples: u64,
    /// Tensors observed with another method than `method` (a recipe's per-tensor overrides).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub method_overrides: BTreeMap<String, Method>,
    /// The data's first sample's input shapes, one per function input, for a model with
    /// dynamic input dims: its untyped values are resolved with them and its MACs counted at
    /// them; absent for a model with static inputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_shapes: Option<Vec<Vec<usize>>>,
    /// For a model calibrated after cross-layer equalization: the per-channel moments of every
    /// value equalized against (by its key before equalization), measured on the data's first
    /// samples; quantize equalizes the model with them again before its keys are read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equalization: Option<BTreeMap<String, ChannelMoments>>,
    pub tensors: BTreeMap<String, TensorStats>,
}

/// Per-channel minimum, maximum and mean square of a value over some samples (what
/// cross-layer equalization weighs its choices with).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChannelMoments {
    pub min: Vec<f32>,
    pub max: Vec<f32>,
    pub mean_square: Vec<f32>,
    /// How far each channel is expected to reach on samples not yet seen (min, max), as
    /// [`crate::PerChannelMinMax::reach`] estimates it; empty in statistics that predate it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reach_min: Vec<f32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reach_max: Vec<f32>,
}

impl StatsFile {
    pub fn new(model_hash: impl Into<String>, method: Method, bins: usize, non_finite: NonFinitePolicy) -> Self {
        StatsFile {
            format_version: FORMAT_VERSION,
            model_hash: model_hash.into(),
            method,
            bins,
            non_finite,
            num_samples: 0,
            method_overrides: BTreeMap::new(),
            input_shapes: None,
            equalization: None,
            tensors: BTreeMap::new(),
        }
    }

    fn observer_for(&mut self, key: &str, per_channel_axis: Option<usize>) -> &mut TensorStats {
        let method = self.method_overrides.get(key).copied().unwrap_or(self.method);
        let (bins, nf) = (self.bins, self.non_finite);
        self.tensors.entry(key.to_string()).or_insert_with(|| {
            let observer = match per_channel_axis {
                Some(a) => Observer::per_channel(a, nf),
                None => Observer::new(method, bins, nf),
            };
            TensorStats {
                min: 0.0,
                max: 0.0,
                range: (0.0, 0.0),
                channel_min: None,
                channel_max: None,
                channel_reach: None,
                observer,
            }
        })
    }

    /// Observes the value of tensor `key` for sample `sample` (per-channel along `axis` when
    /// given). Errors name the key and the sample.
    pub fn observe(
        &mut self,
        key: &str,
        sample: usize,
        x: &ArrayViewD<f32>,
        per_channel_axis: Option<usize>,
    ) -> Result<(), CalibError> {
        let t = self.observer_for(key, per_channel_axis);
        t.observer.observe_sample(x, sample).map_err(|e| match e {
            ObserveError::NonFinite { count, first_index } => CalibError::NonFinite {
                key: key.to_string(),
                sample,
                count,
                first_index,
            },
            ObserveError::Other(e) => e,
        })
    }

    /// Fills every tensor's min/max/range from its observer. A tensor that saw no finite value
    /// is an error naming it.
    pub fn finalize(&mut self) -> Result<(), CalibError> {
        for (key, t) in self.tensors.iter_mut() {
            let (min, max) = t
                .observer
                .min_max()
                .ok_or_else(|| CalibError::Empty { key: key.clone() })?;
            t.min = min;
            t.max = max;
            t.range = t.observer.range().unwrap_or((min, max));
            if let Some((lo, hi)) = t.observer.channel_ranges() {
                t.channel_min = Some(lo);
                t.channel_max = Some(hi);
            }
            t.channel_reach = t.observer.channel_reach();
        }
        Ok(())
    }

    /// Merges another shard of the same model and method; refuses mismatches naming what differs.
    pub fn merge(&mut self, o: &StatsFile) -> Result<(), CalibError> {
        let differ = |what: &str, a: String, b: String| CalibError::Mismatch(format!("{what} differs: {a} vs {b}"));
        if self.format_version != o.format_version {
            return Err(differ(
                "format_version",
                self.format_version.to_string(),
                o.format_version.to_string(),
            ));
        }
        if self.model_hash != o.model_hash {
            return Err(differ(
                "model (model_hash)",
                self.model_hash.clone(),
                o.model_hash.clone(),
            ));
        }
        if self.equalization != o.equalization {
            let on = |e: &Option<BTreeMap<String, ChannelMoments>>| match e {
                Some(_) => "equalized",
                None => "not equalized",
            };
            return Err(differ(
                "cross-layer equalization",
                on(&self.equalization).into(),
                on(&o.equalization).into(),
            ));
        }
        if self.input_shapes != o.input_shapes {
            let (a, b) = (format!("{:?}", self.input_shapes), format!("{:?}", o.input_shapes));
            return Err(differ("input shapes the types were resolved with", a, b));
        }
        if self.method != o.method {
            return Err(differ(
                "method",
                format!("{:?}", self.method),
                format!("{:?}", o.method),
            ));
        }
        if self.method_overrides != o.method_overrides {
            return Err(differ(
                "per-tensor methods",
                format!("{:?}", self.method_overrides),
                format!("{:?}", o.method_overrides),
            ));
        }
        if self.bins != o.bins {
            return Err(differ("bins", self.bins.to_string(), o.bins.to_string()));
        }
        self.absorb(o)?;
        self.num_samples += o.num_samples;
        self.finalize()
    }

    /// Merges the observers of `o` into these (tensors missing here are copied), without
    /// choosing ranges: the streaming step of a calibration run that observes samples in
    /// parallel and absorbs their statistics in sample order. Exact for every mergeable
    /// method, so the result equals observing the samples one after the other.
    pub fn absorb(&mut self, o: &StatsFile) -> Result<(), CalibError> {
        for (key, t) in &o.tensors {
            match self.tensors.get_mut(key) {
                Some(mine) => mine
                    .observer
                    .merge(&t.observer)
                    .map_err(|e| CalibError::Mismatch(format!("tensor '{key}': {e}")))?,
                None => {
                    self.tensors.insert(key.clone(), t.clone());
                }
            }
        }
        Ok(())
    }

    pub fn to_json(&self) -> Result<String, CalibError> {
        serde_json::to_string_pretty(self).map_err(|e| CalibError::Format(e.to_string()))
    }

    /// Parses a stats file, refusing other format versions.
    pub fn from_json(text: &str) -> Result<StatsFile, CalibError> {
        #[derive(Deserialize)]
        struct Version {
            format_version: Option<u32>,
        }
        let v: Version =
            serde_json::from_str(text).map_err(|e| CalibError::Format(format!("not a quantir stats file: {e}")))?;
        match v.format_version {
            Some(FORMAT_VERSION) => {}
            Some(other) => {
                return Err(CalibError::Format(format!(
                    "format_version {other} is not supported (this quantir reads version {FORMAT_VERSION})"
                )))
            }
            None => return Err(CalibError::Format("not a quantir stats file: no format_version".into())),
        }
        serde_json::from_str(text).map_err(|e| CalibError::Format(e.to_string()))
    }

    /// Checks that these statistics were made for the model whose hash is `hash`.
    pub fn check_model(&self, hash: &str) -> Result<(), CalibError> {
        if self.model_hash != hash {
            return Err(CalibError::Mismatch(format!(
                "the statistics were computed for another model (model_hash {} vs {hash})",
                self.model_hash
            )));
        }
        Ok(())
    }
}
