//! SavedModel signature → frozen TF-dialect `func.func`: the signature's outputs are followed
//! back through the graph; every call (`StatefulPartitionedCall`, `PartitionedCall`, or a
//! library function used as an op) is inlined; every read of a variable becomes a `tf.Const`
//! holding its checkpoint value; identities and control-only nodes (`NoOp`, `^dep` inputs)
//! disappear; every other node becomes a generic `tf.<Op>` op.
//!
//! ```mlir
//! // node "digits_cnn_1/conv2d_1/convolution" (Conv2D) of __inference_<lambda>_9824,
//! // its kernel read from variable conv2d/kernel
//! %0 = "tf.Const"() {value = dense<...> : tensor<3x3x1x16xf32>} : () -> tensor<3x3x1x16xf32>
//!        loc("conv2d/kernel")
//! %1 = "tf.Conv2D"(%arg0, %0) {data_format = "NHWC", dilations = [1, 1, 1, 1],
//!        explicit_paddings = [], padding = "SAME", strides = [1, 1, 1, 1], use_cudnn_on_gpu = true}
//!        : (tensor<1x8x8x1xf32>, tensor<3x3x1x16xf32>) -> tensor<1x8x8x16xf32>
//!        loc("digits_cnn_1/conv2d_1/convolution"("digits_cnn_1/conv2d_1/convolution"("__inference_<lambda>_9824":2:1)))
//! ```
//! - attributes left out because they equal the op's default (`stripped_default_attrs`) are
//!   put back from the op list the SavedModel carries; type attributes (`T`, `dtype`) are
//!   dropped, as TensorFlow's importer drops them: the result types carry them; internal
//!   attributes (`_output_shapes`, ...) are dropped;
//! - result types: element types from the op definitions, shapes from `_output_shapes`
//!   when recorded, else found by running the function on zeros;
//! - a value's name location is its node name (made unique with the call path when inlining
//!   brings two nodes of one name), so tensor keys read like TensorFlow's node names;
//! - the function is named after the signature, its arguments and results after the
//!   signature's keys (sorted), in `tf.entry_function` as TensorFlow writes it;
//! - what the interpreter and the rewriter cannot hold is refused with the node named:
//!   control flow (v1 and functional), TensorList ops, string, resource and variant tensors
//!   other than variables read whole.

use super::attrs::{attribute, tensor_value};
use super::bundle::tf_dtype;
use super::proto::{AttrValue, FunctionDef, GraphDef, MetaGraphDef, NodeDef, OpDef, SavedModel};
use super::variables::Checkpoint;
use super::{meta_graph, pb_error, DEFAULT_SIGNATURE};
use crate::formats::FormatError;
use crate::interp::infer_types::infer_types;
use crate::ir::constants::tensor_to_attribute;
use crate::ir::graph::set_function_type;
use crate::ir::types::dtype_to_type;
use crate::ir::types::{attr_type, tensor_type_of};
use melior::dialect::func;
use melior::ir::attribute::{StringAttribute, TypeAttribute};
use melior::ir::block::BlockLike;
use melior::ir::operation::{OperationBuilder, OperationLike, OperationMutLike};
use melior::ir::r#type::FunctionType;
use melior::ir::{Attribute, Block, BlockRef, Identifier, Location, Module, Region, RegionLike, Type, Value};
use melior::Context;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use super::graph_ops::{CALLS, CONTROL_FLOW, DT_RESOURCE, DT_STRING, DT_VARIANT, IDENTITIES, MAX_CALL_DEPTH};

/// A value flowing through the graph: a tensor, or a variable (a resource handle).
#[derive(Clone, Copy)]
enum Val<'c, 'a> {
    Tensor(Value<'c, 'a>),
    Var(usize),
}

struct Var<'c, 'a> {
    node: String,
    shared_name: String,
    in_main_graph: bool,
    /// Its `tf.Const`, made on first read.
    value: Option<Value<'c, 'a>>,
}

/// One graph being emitted: the main graph or an inlined function body.
struct Scope<'g> {
    nodes: &'g [NodeDef],
    by_name: HashMap<&'g str, usize>,
    /// The function's name, or "graph".
    label: String,
    /// The call path that led here, for unique names.
    prefix: String,
    is_function: bool,
}

/// Where a graph input string points.
enum Ref<'s> {
    Arg(&'s str),
    /// Node index and flat output index.
    Node(usize, usize),
}

struct Builder<'c, 'a, 'g> {
    ctx: &'c Context,
    block: BlockRef<'c, 'a>,
    ops: HashMap<&'g str, &'g OpDef>,
    functions: HashMap<&'g str, &'g FunctionDef>,
    checkpoint: Checkpoint<'g>,
    vars: Vec<Var<'c, 'a>>,
    /// (node, shared_name, in the main graph) → index in `vars`.
    var_index: HashMap<(String, String, bool), usize>,
    used_names: HashSet<String>,
    dir: &'g Path,
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Chooses the signature: the one named, else `serving_default`, else the only one.
fn choose_signature<'m>(
    mg: &'m MetaGraphDef,
    name: Option<&str>,
) -> Result<(&'m str, &'m super::proto::SignatureDef), String> {
    let mut names: Vec<&str> = mg
        .signature_def
        .keys()
        .map(String::as_str)
        .filter(|n| !n.starts_with("__"))
        .collect();
    names.sort_unstable();
    let wanted = match name {
        Some(n) => n,
        None if mg.signature_def.contains_key(DEFAULT_SIGNATURE) => DEFAULT_SIGNATURE,
        None if names.len() == 1 => names[0],
        None => DEFAULT_SIGNATURE,
    };
    mg.signature_def
        .get_key_value(wanted)
        .map(|(k, v)| (k.as_str(), v))
        .ok_or_else(|| {
            format!(
                "no signature '{wanted}'; the signatures are: {} (choose one with --signature)",
                crate::text::list_or(&names, "none")
            )
        })
}

/// Imports signature `signature` of a decoded SavedModel whose directory is `dir`.
pub fn import<'c>(
    ctx: &'c Context,
    dir: &Path,
    sm: &SavedModel,
    signature: Option<&str>,
) -> Result<Module<'c>, FormatError> {
    let err = |reason: String| pb_error(dir, reason);
    let mg = meta_graph(sm).ok_or_else(|| err("no meta graph".into()))?;
    let graph = mg
        .graph_def
        .as_ref()
        .ok_or_else(|| err("the meta graph has no graph".into()))?;
    let (sig_name, sig) = choose_signature(mg, signature).map_err(err)?;
    let module = Module::new(Location::unknown(ctx));
    set_versions(ctx, &module, graph);

    // arguments and results in signature-key order
    let inputs: BTreeMap<&str, &super::proto::TensorInfo> = sig.inputs.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let outputs: BTreeMap<&str, &super::proto::TensorInfo> = sig.outputs.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensor_name = |key: &str, t: &super::proto::TensorInfo| -> Result<String, FormatError> {
        t.name.clone().ok_or_else(|| {
            err(format!(
                "signature '{sig_name}': '{key}' is a sparse or composite tensor, which is not supported"
            ))
        })
    };
    let mut arg_specs = Vec::new();
    let mut in_types = Vec::new();
    for (key, t) in &inputs {
        let dtype = tf_dtype(t.dtype).ok_or_else(|| {
            err(format!(
                "signature '{sig_name}': input '{key}' is a {} tensor, which is not supported",
                super::dtype_name(t.dtype)
            ))
        })?;
        let dims = t.tensor_shape.as_ref().and_then(|s| s.dims()).ok_or_else(|| {
            err(format!(
                "signature '{sig_name}': input '{key}' has an unknown rank, which is not supported"
            ))
        })?;
        let ty = tensor_type_of(dtype_to_type(ctx, dtype), Some(&dims));
        in_types.push(ty);
        arg_specs.push((ty, Location::name(ctx, key, Location::unknown(ctx))));
    }
    let join = |m: &BTreeMap<&str, _>| m.keys().copied().map(escape).collect::<Vec<_>>().join(",");
    let entry = Attribute::parse(
        ctx,
        &format!(
            "{{control_outputs = \"\", inputs = \"{}\", outputs = \"{}\"}}",
            join(&inputs),
            join(&outputs)
        ),
    )
    .ok_or_else(|| err("internal: cannot build tf.entry_function".into()))?;
    let region = Region::new();
    region.append_block(Block::new(&arg_specs));
    let f = func::func(
        ctx,
        StringAttribute::new(ctx, sig_name),
        TypeAttribute::new(FunctionType::new(ctx, &in_types, &[]).into()),
        region,
        &[(Identifier::new(ctx, "tf.entry_function"), entry)],
        Location::new(ctx, &dir.join("saved_model.pb").display().to_string(), 0, 0),
    );
    let fref = module.body().append_operation(f);
    let block = fref
        .region(0)
        .ok()
        .and_then(|r| r.first_block())
        .ok_or_else(|| err("internal: function without a body".into()))?;

    let mut b = Builder {
        ctx,
        block,
        ops: HashMap::new(),
        functions: HashMap::new(),
        checkpoint: Checkpoint::new(dir, graph, mg.object_graph_def.as_ref()),
        vars: Vec::new(),
        var_index: HashMap::new(),
        used_names: HashSet::new(),
        dir,
    };
    if let Some(list) = mg.meta_info_def.as_ref().and_then(|m| m.stripped_op_list.as_ref()) {
        b.ops = list.op.iter().map(|o| (o.name.as_str(), o)).collect();
    }
    if let Some(lib) = &graph.library {
        for f in &lib.function {
            if let Some(s) = &f.signature {
                b.functions.insert(s.name.as_str(), f);
            }
        }
    }
    let main = Scope::new(&graph.node, "graph".into(), String::new(), false);
    // the signature's inputs are the placeholders they name
    let mut bound: HashMap<usize, Vec<Val>> = HashMap::new();
    for (k, (key, t)) in inputs.iter().enumerate() {
        let name = tensor_name(key, t)?;
        let node = super::variables::input_node(&name);
        let idx = *main.by_name.get(node).ok_or_else(|| {
            err(format!(
                "signature '{sig_name}': input '{key}' names '{name}', which is not in the graph"
            ))
        })?;
        let arg = block.argument(k).map_err(|e| err(e.to_string()))?;
        b.used_names.insert(key.to_string());
        bound.insert(idx, vec![Val::Tensor(arg.into())]);
    }
    let mut wanted = Vec::new();
    for (key, t) in &outputs {
        wanted.push(tensor_name(key, t)?);
    }
    let vals = b.emit(&main, &HashMap::new(), bound, &wanted, 0)?;
    let mut rets = Vec::new();
    for ((key, _), v) in outputs.iter().zip(vals) {
        match v {
            Val::Tensor(t) => rets.push(t),
            Val::Var(_) => {
                return Err(err(format!(
                    "signature '{sig_name}': output '{key}' is a variable, not a tensor"
                )))
            }
        }
    }
    block.append_operation(func::r#return(&rets, Location::unknown(ctx)));
    let out_types: Vec<Type> = rets.iter().map(melior::ir::ValueLike::r#type).collect();
    set_function_type(ctx, fref, &in_types, &out_types);
    drop(b);
    infer_types(ctx, &module, &[]);
    Ok(module)
}

/// `tf.versions` on the module, as TensorFlow's importer writes it.
fn set_versions(ctx: &Context, module: &Module, graph: &GraphDef) {
    let Some(v) = &graph.versions else { return };
    let bad: Vec<String> = v.bad_consumers.iter().map(|x| x.to_string()).collect();
    let text = format!(
        "{{bad_consumers = [{}], min_consumer = {} : i32, producer = {} : i32}}",
        bad.join(", "),
        v.min_consumer,
        v.producer
    );
    if let Some(a) = Attribute::parse(ctx, &text) {
        let mut op = crate::ir::graph::module_op_mut(module);
        op.set_attribute("tf.versions", a);
    }
}

impl<'g> Scope<'g> {
    fn new(nodes: &'g [NodeDef], label: String, prefix: String, is_function: bool) -> Self {
        let by_name = nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
        Scope {
            nodes,
            by_name,
            label,
            prefix,
            is_function,
        }
    }
}

impl<'c, 'a, 'g> Builder<'c, 'a, 'g> {
    fn err(&self, scope: &Scope, node: &NodeDef, reason: impl std::fmt::Display) -> FormatError {
        pb_error(
            self.dir,
            format!("{} node '{}' ({}): {reason}", scope.label, node.name, node.op),
        )
    }

    /// The value of `attr` on `node`, or the op's default for it.
    fn attr<'n>(&'n self, node: &'n NodeDef, name: &str) -> Option<&'n AttrValue> {
        node.attr.get(name).or_else(|| {
            self.ops
                .get(node.op.as_str())?
                .attr
                .iter()
                .find(|a| a.name == name)?
                .default_value
                .as_ref()
        })
    }

    /// The outputs of `node` by arg: (arg name, TensorFlow dtypes of its tensors).
    fn output_args(&self, scope: &Scope, node: &NodeDef) -> Result<Vec<(String, Vec<i32>)>, FormatError> {
        if CALLS.contains(&node.op.as_str()) {
            let types = self
                .attr(node, "Tout")
                .and_then(|a| a.list.as_ref())
                .map(|l| l.r#type.clone())
                .unwrap_or_default();
            return Ok(vec![("output".into(), types)]);
        }
        if let Some(f) = self.functions.get(node.op.as_str()) {
            let sig = f.signature.as_ref();
            return Ok(sig
                .map(|s| s.output_arg.iter().map(|a| (a.name.clone(), vec![a.r#type])).collect())
                .unwrap_or_default());
        }
        let op = self
            .ops
            .get(node.op.as_str())
            .ok_or_else(|| self.err(scope, node, "the op is not described in the SavedModel's op list"))?;
        let mut out = Vec::new();
        for a in &op.output_arg {
            let single = if a.r#type != 0 {
                a.r#type
            } else {
                self.attr(node, &a.type_attr).and_then(|v| v.r#type).unwrap_or(0)
            };
            let types = if !a.number_attr.is_empty() {
                let n = self.attr(node, &a.number_attr).and_then(|v| v.i).unwrap_or(0).max(0) as usize;
                vec![single; n]
            } else if !a.type_list_attr.is_empty() {
                self.attr(node, &a.type_list_attr)
                    .and_then(|v| v.list.as_ref())
                    .map(|l| l.r#type.clone())
                    .unwrap_or_default()
            } else {
                vec![single]
            };
            out.push((a.name.clone(), types));
        }
        Ok(out)
    }

    /// Where input string `s` of a node in `scope` points (None for a control input).
    fn resolve<'s>(&self, scope: &Scope, args: &HashMap<String, Val>, s: &'s str) -> Result<Option<Ref<'s>>, String> {
        if s.starts_with('^') {
            return Ok(None);
        }
        if scope.is_function && args.contains_key(s) {
            return Ok(Some(Ref::Arg(s)));
        }
        let parts: Vec<&str> = s.split(':').collect();
        let node_idx = |n: &str| {
            scope
                .by_name
                .get(n)
                .copied()
                .ok_or_else(|| format!("input '{s}' names no node of {}", scope.label))
        };
        Ok(Some(match parts.as_slice() {
            [n] => Ref::Node(node_idx(n)?, 0),
            [n, k] => Ref::Node(node_idx(n)?, k.parse().map_err(|_| format!("bad input '{s}'"))?),
            [n, arg, k] => {
                let idx = node_idx(n)?;
                let k: usize = k.parse().map_err(|_| format!("bad input '{s}'"))?;
                let node = &scope.nodes[idx];
                let outs = self.output_args(scope, node).map_err(|e| e.to_string())?;
                let mut offset = 0;
                let mut found = None;
                for (name, types) in &outs {
                    if name == arg {
                        found = Some(offset);
                        break;
                    }
                    offset += types.len();
                }
                let base = found.ok_or_else(|| format!("input '{s}': {} has no output '{arg}'", node.op))?;
                Ref::Node(idx, base + k)
            }
            _ => return Err(format!("bad input '{s}'")),
        }))
    }

    /// Emits what `wanted` (input strings of `scope`) needs, in dependency order, and returns
    /// their values. `bound` holds values of nodes given from outside (signature inputs).
    fn emit(
        &mut self,
        scope: &Scope<'g>,
        args: &HashMap<String, Val<'c, 'a>>,
        mut bound: HashMap<usize, Vec<Val<'c, 'a>>>,
        wanted: &[String],
        depth: usize,
    ) -> Result<Vec<Val<'c, 'a>>, FormatError> {
        let dir = self.dir;
        let scope_err = |reason: String| pb_error(dir, format!("{}: {reason}", scope.label));
        let cycle = |n: &NodeDef| self.err(scope, n, "the graph has a cycle (a loop), which is not supported");
        let wanted_refs = wanted
            .iter()
            .map(|w| self.resolve(scope, args, w))
            .collect::<Result<Vec<_>, _>>()
            .map_err(scope_err)?;
        // the nodes the wanted values depend on, in post order (iterative: graphs are deep);
        // each node's inputs are resolved once, here
        let mut order = Vec::new();
        let mut inputs_of: HashMap<usize, Vec<Ref>> = HashMap::new();
        let mut done: HashMap<usize, bool> = HashMap::new(); // false while on the DFS path
        for root in wanted_refs.iter().filter_map(|r| match r {
            Some(Ref::Node(i, _)) => Some(*i),
            _ => None,
        }) {
            let mut stack = vec![(root, false)];
            while let Some((i, expanded)) = stack.pop() {
                if expanded {
                    done.insert(i, true);
                    order.push(i);
                    continue;
                }
                if done.contains_key(&i) {
                    continue;
                }
                done.insert(i, false);
                stack.push((i, true));
                if bound.contains_key(&i) {
                    continue;
                }
                let n = &scope.nodes[i];
                let mut refs = Vec::new();
                for inp in &n.input {
                    let Some(r) = self.resolve(scope, args, inp).map_err(|e| self.err(scope, n, e))? else {
                        continue;
                    };
                    if let Ref::Node(j, _) = r {
                        match done.get(&j) {
                            Some(false) => return Err(cycle(n)),
                            Some(true) => {}
                            None => stack.push((j, false)),
                        }
                    }
                    refs.push(r);
                }
                inputs_of.insert(i, refs);
            }
        }
        let value = |bound: &HashMap<usize, Vec<Val<'c, 'a>>>, r: &Ref| match r {
            Ref::Arg(a) => args.get(*a).copied(),
            Ref::Node(j, k) => bound.get(j).and_then(|v| v.get(*k)).copied(),
        };
        for i in order {
            let Some(refs) = inputs_of.remove(&i) else { continue }; // bound from outside
            let n = &scope.nodes[i];
            let mut ins = Vec::new();
            for r in &refs {
                ins.push(value(&bound, r).ok_or_else(|| {
                    let what = match r {
                        Ref::Arg(a) => format!("argument '{a}'"),
                        Ref::Node(j, k) => format!("output {k} of '{}'", scope.nodes[*j].name),
                    };
                    self.err(scope, n, format!("its input {what} has no value"))
                })?);
            }
            let outs = self.node(scope, i, ins, depth)?;
            bound.insert(i, outs);
        }
        let mut out = Vec::new();
        for (w, r) in wanted.iter().zip(&wanted_refs) {
            out.push(match r {
                Some(r) => value(&bound, r).ok_or_else(|| scope_err(format!("'{w}' has no value")))?,
                None => return Err(scope_err(format!("'{w}' is a control dependency, not a value"))),
            });
        }
        Ok(out)
    }

    /// A name not used yet: `name`, else `prefix/name`, else with a numeric suffix.
    fn unique(&mut self, prefix: &str, name: &str) -> String {
        let mut candidates = vec![name.to_string()];
        if !prefix.is_empty() {
            candidates.push(format!("{prefix}/{name}"));
        }
        let base = candidates.last().cloned().unwrap_or_default();
        let mut k = 1;
        let chosen = loop {
            if let Some(c) = candidates.iter().find(|c| !self.used_names.contains(*c)) {
                break c.clone();
            }
            candidates = vec![format!("{base}_{k}")];
            k += 1;
        };
        self.used_names.insert(chosen.clone());
        chosen
    }

    /// The `tf.Const` of a variable's checkpoint value (one per variable).
    fn read_variable(&mut self, scope: &Scope, node: &NodeDef, var: usize) -> Result<Value<'c, 'a>, FormatError> {
        if let Some(v) = self.vars[var].value {
            return Ok(v);
        }
        let (vnode, shared, main) = {
            let v = &self.vars[var];
            (v.node.clone(), v.shared_name.clone(), v.in_main_graph)
        };
        let t = self.checkpoint.value(&vnode, &shared, main)?;
        if let Some(want) = self.attr(node, "dtype").and_then(|a| a.r#type).and_then(tf_dtype) {
            if want != t.dtype() {
                return Err(self.err(
                    scope,
                    node,
                    format!(
                        "reads variable '{vnode}' as {want}, but the checkpoint holds {}",
                        t.dtype()
                    ),
                ));
            }
        }
        let display = if shared.is_empty() { vnode } else { shared };
        let name = self.unique("", &display);
        let attr = tensor_to_attribute(self.ctx, &t);
        let v = self.constant(attr, Location::name(self.ctx, &name, Location::unknown(self.ctx)))?;
        self.vars[var].value = Some(v);
        Ok(v)
    }

    fn constant(&self, attr: Attribute<'c>, loc: Location<'c>) -> Result<Value<'c, 'a>, FormatError> {
        let op = OperationBuilder::new("tf.Const", loc)
            .add_attributes(&[(Identifier::new(self.ctx, "value"), attr)])
            .add_results(&[attr_type(attr)])
            .build()
            .map_err(|e| FormatError::Invalid(e.to_string()))?;
        let op = self.block.append_operation(op);
        Ok(op.result(0).map_err(|e| FormatError::Invalid(e.to_string()))?.into())
    }

    /// Emits node `i` of `scope` on input values `ins`; returns its outputs.
    fn node(
        &mut self,
        scope: &Scope<'g>,
        i: usize,
        ins: Vec<Val<'c, 'a>>,
        depth: usize,
    ) -> Result<Vec<Val<'c, 'a>>, FormatError> {
        let n: &'g NodeDef = &scope.nodes[i];
        let op = n.op.as_str();
        if IDENTITIES.contains(&op) {
            return Ok(ins);
        }
        match op {
            "NoOp" => return Ok(vec![]),
            "VarHandleOp" | "VariableV2" | "Variable" => {
                let shared_name = match n.attr.get("shared_name").and_then(|a| a.s.as_ref()) {
                    Some(s) if !s.is_empty() => String::from_utf8_lossy(s).into_owned(),
                    _ => n.name.clone(),
                };
                let key = (n.name.clone(), shared_name.clone(), !scope.is_function);
                let idx = match self.var_index.get(&key) {
                    Some(&k) => k,
                    None => {
                        self.vars.push(Var {
                            node: n.name.clone(),
                            shared_name,
                            in_main_graph: !scope.is_function,
                            value: None,
                        });
                        self.var_index.insert(key, self.vars.len() - 1);
                        self.vars.len() - 1
                    }
                };
                // a TF1 reference variable is its value
                if op != "VarHandleOp" {
                    return Ok(vec![Val::Tensor(self.read_variable(scope, n, idx)?)]);
                }
                return Ok(vec![Val::Var(idx)]);
            }
            "ReadVariableOp" => {
                let Some(Val::Var(v)) = ins.first().copied() else {
                    return Err(self.err(scope, n, "its input is not a variable"));
                };
                return Ok(vec![Val::Tensor(self.read_variable(scope, n, v)?)]);
            }
            "Placeholder" => {
                return Err(self.err(scope, n, "a placeholder that is not an input of the signature"));
            }
            "PlaceholderWithDefault" => return Ok(ins),
            "Const" => {
                let t = self
                    .attr(n, "value")
                    .and_then(|a| a.tensor.as_ref())
                    .ok_or_else(|| self.err(scope, n, "no value"))?;
                let t = tensor_value(t).map_err(|e| self.err(scope, n, e))?;
                let loc = self.node_location(scope, i, 1);
                return Ok(vec![Val::Tensor(
                    self.constant(tensor_to_attribute(self.ctx, &t), loc)?,
                )]);
            }
            _ => {}
        }
        if CONTROL_FLOW.contains(&op) {
            return Err(self.err(
                scope,
                n,
                "control flow is not supported (quantir imports straight-line graphs)",
            ));
        }
        if op.starts_with("TensorList") {
            return Err(self.err(scope, n, "TensorList ops are not supported"));
        }
        let callee = if CALLS.contains(&op) {
            let name = self
                .attr(n, "f")
                .and_then(|a| a.func.as_ref())
                .map(|f| f.name.clone())
                .ok_or_else(|| self.err(scope, n, "a call without a function"))?;
            Some(name)
        } else {
            self.functions.contains_key(op).then(|| op.to_string())
        };
        if let Some(callee) = callee {
            return self.inline(scope, n, &callee, ins, depth);
        }
        // an ordinary op
        let mut operands = Vec::new();
        for v in &ins {
            match v {
                Val::Tensor(t) => operands.push(*t),
                Val::Var(k) => {
                    let name = self.vars[*k].shared_name.clone();
                    return Err(self.err(
                        scope,
                        n,
                        format!("uses variable '{name}' directly; only whole reads (ReadVariableOp) are supported"),
                    ));
                }
            }
        }
        let out_args = self.output_args(scope, n)?;
        let out_types: Vec<i32> = out_args.iter().flat_map(|(_, t)| t.iter().copied()).collect();
        let shapes: Vec<Option<Vec<Option<i64>>>> = n
            .attr
            .get("_output_shapes")
            .and_then(|a| a.list.as_ref())
            .map(|l| l.shape.iter().map(|s| s.dims()).collect())
            .unwrap_or_default();
        let mut results = Vec::new();
        for (k, &t) in out_types.iter().enumerate() {
            let dtype = match t {
                DT_STRING => return Err(self.err(scope, n, "string tensors are not supported")),
                DT_RESOURCE => {
                    return Err(self.err(scope, n, "resource tensors other than variables are not supported"))
                }
                DT_VARIANT => return Err(self.err(scope, n, "variant tensors are not supported")),
                _ => tf_dtype(t).ok_or_else(|| {
                    self.err(
                        scope,
                        n,
                        format!(
                            "output {k} is a {} tensor, which is not supported",
                            super::dtype_name(t)
                        ),
                    )
                })?,
            };
            let dims = shapes.get(k).cloned().flatten();
            results.push(tensor_type_of(dtype_to_type(self.ctx, dtype), dims.as_deref()));
        }
        let mut names: Vec<&str> = n.attr.keys().map(String::as_str).collect();
        if let Some(def) = self.ops.get(op) {
            names.extend(def.attr.iter().map(|a| a.name.as_str()));
        }
        names.sort_unstable();
        names.dedup();
        let mut attrs = Vec::new();
        for name in names {
            if name.starts_with('_') {
                continue;
            }
            let Some(v) = self.attr(n, name) else { continue };
            let a = attribute(self.ctx, v).map_err(|e| self.err(scope, n, format!("attribute '{name}': {e}")))?;
            if let Some(a) = a {
                attrs.push((Identifier::new(self.ctx, name), a));
            }
        }
        let loc = self.node_location(scope, i, results.len());
        let built = OperationBuilder::new(&format!("tf.{op}"), loc)
            .add_operands(&operands)
            .add_attributes(&attrs)
            .add_results(&results)
            .build()
            .map_err(|e| self.err(scope, n, e))?;
        let built = self.block.append_operation(built);
        Ok(built.results().map(|r| Val::Tensor(r.into())).collect())
    }

    /// `loc("key"("node"("function":N:1)))`, fused over the results when there are several.
    fn node_location(&mut self, scope: &Scope, i: usize, results: usize) -> Location<'c> {
        let n = &scope.nodes[i];
        let ctx = self.ctx;
        let node_loc = Location::name(ctx, &n.name, Location::new(ctx, &scope.label, i + 1, 1));
        let key = self.unique(&scope.prefix, &n.name);
        if results <= 1 {
            return Location::name(ctx, &key, node_loc);
        }
        let locs: Vec<Location> = (0..results)
            .map(|j| {
                let name = if j == 0 { key.clone() } else { format!("{key}:{j}") };
                Location::name(ctx, &name, node_loc)
            })
            .collect();
        Location::fused(ctx, &locs, Attribute::unit(ctx))
    }

    /// Inlines library function `callee`, called by node `n` on `ins`.
    fn inline(
        &mut self,
        scope: &Scope<'g>,
        n: &'g NodeDef,
        callee: &str,
        ins: Vec<Val<'c, 'a>>,
        depth: usize,
    ) -> Result<Vec<Val<'c, 'a>>, FormatError> {
        if depth >= MAX_CALL_DEPTH {
            return Err(self.err(
                scope,
                n,
                format!("calls nested deeper than {MAX_CALL_DEPTH} (recursion?)"),
            ));
        }
        let f: &'g FunctionDef = *self.functions.get(callee).ok_or_else(|| {
            self.err(
                scope,
                n,
                format!("calls '{callee}', which is not in the function library"),
            )
        })?;
        let sig = f
            .signature
            .as_ref()
            .ok_or_else(|| self.err(scope, n, format!("function '{callee}' has no signature")))?;
        if sig.input_arg.len() != ins.len() {
            return Err(self.err(
                scope,
                n,
                format!(
                    "passes {} inputs to '{callee}', which takes {}",
                    ins.len(),
                    sig.input_arg.len()
                ),
            ));
        }
        let args: HashMap<String, Val> = sig.input_arg.iter().map(|a| a.name.clone()).zip(ins).collect();
        let prefix = if scope.prefix.is_empty() {
            n.name.clone()
        } else {
            format!("{}/{}", scope.prefix, n.name)
        };
        let body = Scope::new(&f.node_def, callee.to_string(), prefix, true);
        let mut wanted = Vec::new();
        for a in &sig.output_arg {
            wanted.push(
                f.ret.get(&a.name).cloned().ok_or_else(|| {
                    self.err(scope, n, format!("'{callee}' does not say what output '{}' is", a.name))
                })?,
            );
        }
        self.emit(&body, &args, HashMap::new(), &wanted, depth + 1)
    }
}
