//! TensorFlow SavedModel directories (`saved_model.pb` + `variables/`): one signature becomes
//! a frozen TF-dialect module — weights as `tf.Const`, no resource variables — the same kind
//! of module TensorFlow's own MLIR export of a frozen graph is, so that everything after the
//! import is shared with the `.mlir` path.
//!
//! - [`proto`]: the protobuf messages (`saved_model.pb`, and the checkpoint's object graph);
//! - [`bundle`]: the variables checkpoint (TensorBundle: an SSTable index and data shards);
//! - [`variables`]: which checkpoint key holds each variable the graph reads;
//! - [`import`]: the signature's graph, its called functions inlined, as TF-dialect ops;
//! - [`attrs`]: TensorProto and AttrValue as MLIR attributes.

pub mod attrs;
pub mod bundle;
pub mod graph_ops;
pub mod import;
pub mod proto;
pub mod variables;

use crate::formats::FormatError;
use melior::ir::Module;
use melior::Context;
use prost::Message;
use proto::{MetaGraphDef, SavedModel, TensorInfo};
use serde::Serialize;
use std::path::Path;

/// The signature imported when none is named.
pub const DEFAULT_SIGNATURE: &str = "serving_default";

/// True when `path` is a SavedModel directory.
pub fn is_saved_model(path: &Path) -> bool {
    path.join("saved_model.pb").is_file()
}

/// An error about `saved_model.pb` in `dir`.
pub(crate) fn pb_error(dir: &Path, reason: impl Into<String>) -> FormatError {
    FormatError::SavedModel {
        path: dir.join("saved_model.pb"),
        reason: reason.into(),
    }
}

/// Reads and decodes `dir/saved_model.pb`.
pub fn read(dir: &Path) -> Result<SavedModel, FormatError> {
    let path = dir.join("saved_model.pb");
    let bytes = std::fs::read(&path).map_err(|source| FormatError::Read { path, source })?;
    let sm = SavedModel::decode(bytes.as_slice())
        .map_err(|e| pb_error(dir, format!("not a valid SavedModel protobuf ({e})")))?;
    if sm.meta_graphs.is_empty() {
        return Err(pb_error(dir, "not a valid SavedModel: no meta graph"));
    }
    Ok(sm)
}

/// The meta graph served: the one tagged `serve`, else the first.
pub fn meta_graph(sm: &SavedModel) -> Option<&MetaGraphDef> {
    sm.meta_graphs
        .iter()
        .find(|m| {
            m.meta_info_def
                .as_ref()
                .is_some_and(|i| i.tags.iter().any(|t| t == "serve"))
        })
        .or_else(|| sm.meta_graphs.first())
}

/// One input or output of a signature.
#[derive(Debug, Clone, Serialize)]
pub struct TensorSpec {
    /// The signature key (the name data arrays are matched by).
    pub key: String,
    /// The graph tensor it stands for (`node:index`).
    pub tensor: String,
    pub dtype: String,
    /// None when the rank is unknown; a None dim is unknown.
    pub shape: Option<Vec<Option<i64>>>,
}

/// A signature of the SavedModel.
#[derive(Debug, Clone, Serialize)]
pub struct SignatureInfo {
    pub name: String,
    pub method: String,
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
}

/// TensorFlow's DataType names for the types quantir does not compute with.
pub fn dtype_name(t: i32) -> String {
    match (bundle::tf_dtype(t), t) {
        (Some(d), _) => d.to_string(),
        (None, 7) => "string".into(),
        (None, 20) => "resource".into(),
        (None, 21) => "variant".into(),
        (None, t) => format!("DataType {t}"),
    }
}

fn spec(key: &str, t: &TensorInfo) -> TensorSpec {
    let tensor = match (&t.name, &t.coo_sparse, &t.composite_tensor) {
        (Some(n), _, _) => n.clone(),
        (None, Some(_), _) => "(sparse)".into(),
        _ => "(composite)".into(),
    };
    TensorSpec {
        key: key.to_string(),
        tensor,
        dtype: dtype_name(t.dtype),
        shape: t.tensor_shape.as_ref().and_then(|s| s.dims()),
    }
}

impl std::fmt::Display for SignatureInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "signature '{}' ({})", self.name, self.method)?;
        for (what, specs) in [("input ", &self.inputs), ("output", &self.outputs)] {
            for s in specs {
                let shape = match &s.shape {
                    None => "unknown rank".to_string(),
                    Some(d) => d
                        .iter()
                        .map(|x| x.map_or("?".to_string(), |n| n.to_string()))
                        .collect::<Vec<_>>()
                        .join("x"),
                };
                writeln!(f, "  {what} {}: {}[{shape}] ({})", s.key, s.dtype, s.tensor)?;
            }
        }
        Ok(())
    }
}

/// The signatures of a SavedModel, by name (TensorFlow's internal `__saved_model_init_op`
/// is not one a user runs and is left out).
pub fn signatures(dir: &Path) -> Result<Vec<SignatureInfo>, FormatError> {
    let sm = read(dir)?;
    let mg = meta_graph(&sm).ok_or_else(|| pb_error(dir, "no meta graph"))?;
    let mut out: Vec<SignatureInfo> = mg
        .signature_def
        .iter()
        .filter(|(name, _)| !name.starts_with("__"))
        .map(|(name, s)| {
            let mut inputs: Vec<TensorSpec> = s.inputs.iter().map(|(k, t)| spec(k, t)).collect();
            let mut outputs: Vec<TensorSpec> = s.outputs.iter().map(|(k, t)| spec(k, t)).collect();
            inputs.sort_by(|a, b| a.key.cmp(&b.key));
            outputs.sort_by(|a, b| a.key.cmp(&b.key));
            SignatureInfo {
                name: name.clone(),
                method: s.method_name.clone(),
                inputs,
                outputs,
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Imports signature `signature` (default [`DEFAULT_SIGNATURE`]) of the SavedModel in `dir`.
pub fn load<'c>(ctx: &'c Context, dir: &Path, signature: Option<&str>) -> Result<Module<'c>, FormatError> {
    let sm = read(dir)?;
    import::import(ctx, dir, &sm, signature)
}
