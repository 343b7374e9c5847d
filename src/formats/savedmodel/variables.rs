//! Which checkpoint key holds the value of each variable a SavedModel's graph reads.
//!
//! A TF2 SavedModel's graph holds one `VarHandleOp` per variable; the call that serves a
//! signature takes them as its last inputs, and the object graph says which saved objects
//! those inputs are (`SavedConcreteFunction.bound_inputs`). The checkpoint's own object
//! graph (`_CHECKPOINTABLE_OBJECT_GRAPH`), walked from the root in step with the saved one by
//! child name (as TensorFlow's loader does), gives each object's checkpoint key
//! (`vars/0/.ATTRIBUTES/VARIABLE_VALUE`). A handle no call binds is matched to the saved
//! variable of its `shared_name`. TF1 SavedModels name a variable by its node (or
//! `shared_name`): that name is the key.

use super::bundle::Bundle;
use super::proto::{GraphDef, SavedObjectGraph, TrackableObjectGraph};
use crate::formats::FormatError;
use crate::tensor::Tensor;
use prost::Message;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// The checkpoint tensor holding the serialized TrackableObjectGraph.
pub const OBJECT_GRAPH_KEY: &str = "_CHECKPOINTABLE_OBJECT_GRAPH";

/// The variables checkpoint of a SavedModel, opened when first needed.
pub struct Checkpoint<'g> {
    prefix: PathBuf,
    bundle: Option<Bundle>,
    /// Main-graph `VarHandleOp` node → saved object id, from the calls' bound inputs.
    object_of_handle: HashMap<String, i32>,
    /// Saved variable name → saved object id.
    object_of_name: HashMap<String, i32>,
    /// Saved object id → checkpoint key (filled when the bundle is opened).
    key_of_object: HashMap<i32, String>,
    saved_objects: Option<&'g SavedObjectGraph>,
}

/// The node a graph input string names ("node", "node:1", "^node" → "node").
pub fn input_node(input: &str) -> &str {
    let s = input.strip_prefix('^').unwrap_or(input);
    s.split(':').next().unwrap_or(s)
}

impl<'g> Checkpoint<'g> {
    pub fn new(dir: &Path, graph: &GraphDef, objects: Option<&'g SavedObjectGraph>) -> Checkpoint<'g> {
        let mut object_of_handle = HashMap::new();
        let mut object_of_name = HashMap::new();
        if let Some(objects) = objects {
            for (id, o) in objects.nodes.iter().enumerate() {
                match (&o.variable, i32::try_from(id)) {
                    (Some(v), Ok(id)) if !v.name.is_empty() => {
                        object_of_name.entry(v.name.clone()).or_insert(id);
                    }
                    _ => {}
                }
            }
            for n in &graph.node {
                let Some(f) = n.attr.get("f").and_then(|a| a.func.as_ref()) else {
                    continue;
                };
                let Some(cf) = objects.concrete_functions.get(&f.name) else {
                    continue;
                };
                let data: Vec<&String> = n.input.iter().filter(|i| !i.starts_with('^')).collect();
                let Some(first) = data.len().checked_sub(cf.bound_inputs.len()) else {
                    continue;
                };
                for (input, &id) in data[first..].iter().zip(&cf.bound_inputs) {
                    object_of_handle.insert(input_node(input).to_string(), id);
                }
            }
        }
        Checkpoint {
            prefix: dir.join("variables").join("variables"),
            bundle: None,
            object_of_handle,
            object_of_name,
            key_of_object: HashMap::new(),
            saved_objects: objects,
        }
    }

    /// Opens the bundle (once) and reads its object graph's checkpoint keys.
    fn open(&mut self) -> Result<(), FormatError> {
        if self.bundle.is_some() {
            return Ok(());
        }
        let b = Bundle::open(&self.prefix).map_err(|e| FormatError::Invalid(e.to_string()))?;
        let mut keys = HashMap::new();
        if let (Some(saved), true) = (self.saved_objects, b.entries.contains_key(OBJECT_GRAPH_KEY)) {
            let blob = b
                .read_strings(OBJECT_GRAPH_KEY)
                .map_err(|e| FormatError::Invalid(e.to_string()))?;
            let bytes = blob.first().map(Vec::as_slice).unwrap_or_default();
            let trackable = TrackableObjectGraph::decode(bytes).map_err(|e| {
                FormatError::Invalid(format!(
                    "{}: '{OBJECT_GRAPH_KEY}' is not a valid object graph ({e})",
                    self.prefix.display()
                ))
            })?;
            keys = object_keys(saved, &trackable);
        }
        self.key_of_object = keys;
        self.bundle = Some(b);
        Ok(())
    }

    /// The value of the variable made by `node` (a `VarHandleOp` of the main graph when
    /// `in_main_graph`, else of a function body) with `shared_name`.
    pub fn value(&mut self, node: &str, shared_name: &str, in_main_graph: bool) -> Result<Tensor, FormatError> {
        self.open()?;
        // by the call's bound inputs, else by the saved variable's name
        let object = in_main_graph
            .then(|| self.object_of_handle.get(node))
            .flatten()
            .or_else(|| self.object_of_name.get(shared_name));
        let by_object = object.and_then(|id| self.key_of_object.get(id)).cloned();
        let index = format!("{}.index", self.prefix.display());
        let b = self
            .bundle
            .as_ref()
            .ok_or_else(|| FormatError::Invalid("internal: checkpoint not open".into()))?;
        let key = by_object
            .or_else(|| {
                [shared_name, node]
                    .into_iter()
                    .find(|k| !k.is_empty() && b.entries.contains_key(*k))
                    .map(str::to_string)
            })
            .ok_or_else(|| {
                FormatError::Invalid(format!(
                    "{index}: no checkpoint value for variable '{}' (node '{node}')",
                    if shared_name.is_empty() { node } else { shared_name }
                ))
            })?;
        b.read(&key).map_err(|e| FormatError::Invalid(e.to_string()))
    }
}

/// Checkpoint key of every variable of the saved object graph: both graphs walked from their
/// roots, children matched by local name; the checkpoint graph may have cycles.
pub fn object_keys(saved: &SavedObjectGraph, trackable: &TrackableObjectGraph) -> HashMap<i32, String> {
    let mut out = HashMap::new();
    let mut seen = HashSet::new();
    let mut stack = vec![(0i32, 0i32)];
    while let Some((s, t)) = stack.pop() {
        if !seen.insert(t) {
            continue;
        }
        let (Some(so), Some(to)) = (saved.nodes.get(s as usize), trackable.nodes.get(t as usize)) else {
            continue;
        };
        if so.variable.is_some() {
            if let Some(a) = to.attributes.iter().find(|a| a.name == "VARIABLE_VALUE") {
                out.insert(s, a.checkpoint_key.clone());
            }
        }
        for c in &to.children {
            if let Some(sc) = so.children.iter().find(|x| x.local_name == c.local_name) {
                stack.push((sc.node_id, c.node_id));
            }
        }
    }
    out
}
