//! The interpreter: compiles a `func.func` into a [`Program`] of kernels (attributes parsed,
//! constants read and constant subgraphs folded once), then runs it on [`Tensor`]s, calling an
//! observer with each watched value as soon as it is computed and dropping every value after
//! its last use.
//!
//! A `Program` holds no MLIR handle: it is `Send + Sync`, so samples run in parallel, each on
//! one thread, and results never depend on the thread count.

pub mod desc;
pub mod fusion;
pub mod infer_types;
pub mod kernels;
mod layout_plan;
pub mod onnx;
pub mod ort_fusion;
pub mod ort_x86;
mod pad_fusion;
pub mod tf;
pub mod upstream;

use crate::ir::attrs::op_attrs;
use crate::ir::graph::{body_ops, find_function, op_name};
use crate::ir::keys::TensorKeys;
use crate::ir::ops::{entry_function_names, is_constant_op, location_string, read_constants};
use crate::ir::quant::params_from_type;
use crate::ir::types::{tensor_type, Dim, TensorType};
use crate::ir::{attribute_to_tensor, IrError};
use crate::params::Scheme;
use crate::tensor::{DType, Tensor};
use desc::OpDesc;
pub use kernels::Kernel;
use melior::ir::block::BlockLike;
use melior::ir::operation::OperationLike;
use melior::ir::{Module, RegionLike, Type, ValueLike};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum InterpError {
    #[error("{loc}: {op} (tensor '{key}'): {reason}")]
    Unsupported {
        op: String,
        loc: String,
        key: String,
        reason: String,
    },
    #[error("{loc}: {op} (tensor '{key}') failed: {message}")]
    Kernel {
        op: String,
        loc: String,
        key: String,
        message: String,
    },
    #[error("input '{name}': expected {expected}, got {found}")]
    Input {
        name: String,
        expected: String,
        found: String,
    },
    #[error("the function takes {expected} inputs, got {found}")]
    InputCount { expected: usize, found: usize },
    #[error("no tensor '{key}' in @{function}")]
    UnknownKey { key: String, function: String },
    #[error("observer of tensor '{key}': {message}")]
    Observer { key: String, message: String },
    #[error(transparent)]
    Ir(#[from] IrError),
}

/// One argument of the function: its name (from `tf.entry_function`, else its tensor key),
/// element type and dims.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InputSpec {
    pub name: String,
    pub key: String,
    pub dtype: Option<DType>,
    pub dims: Vec<Dim>,
    pub r#type: String,
}

impl InputSpec {
    /// Checks a tensor against the declared type (dynamic dims accept any size).
    pub fn check(&self, t: &Tensor) -> Result<(), InterpError> {
        let dims_ok = t.shape().len() == self.dims.len()
            && t.shape()
                .iter()
                .zip(&self.dims)
                .all(|(&n, d)| matches!(d, Dim::Dynamic) || *d == Dim::Static(n));
        if Some(t.dtype()) != self.dtype || !dims_ok {
            return Err(InterpError::Input {
                name: self.name.clone(),
                expected: self.r#type.clone(),
                found: format!("{} of shape {:?}", t.dtype(), t.shape()),
            });
        }
        Ok(())
    }
}

/// A value the program computes: its key, type and producing op.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ValueInfo {
    pub key: String,
    pub producer: String,
    pub dtype: Option<DType>,
    pub dims: Vec<Dim>,
    /// Known at compile time (a constant, or folded from constants).
    pub constant: bool,
}

struct Step {
    kernel: Box<dyn Kernel>,
    inputs: Vec<usize>,
    outputs: Vec<usize>,
    op: String,
    loc: String,
}

/// A compute op whose single consumer is a per-channel bias add (and, optionally, a ReLU or
/// ReLU6 after that): run as one step that applies bias and activation in a single pass over
/// the compute op's output, unless an observer watches one of the values in between.
#[derive(Debug, Clone)]
struct Fusion {
    /// The steps folded into this one.
    tail: Vec<usize>,
    /// Per-channel scale and bias (constant slots) and the activation: y = act(y·scale + bias).
    scale: Option<usize>,
    bias: Option<usize>,
    act: Option<kernels::elementwise::UnOp>,
    /// Where the head's output keeps its channels.
    axis: fusion::ChannelAxis,
    /// Values the fused step does not materialise, and the value it produces.
    skipped: Vec<usize>,
    out: usize,
}

/// A compiled function.
pub struct Program {
    pub function: String,
    pub inputs: Vec<InputSpec>,
    pub output_names: Vec<String>,
    pub values: Vec<ValueInfo>,
    steps: Vec<Step>,
    /// Shared with the kernels' descriptions at compile time, never copied.
    consts: Vec<Option<Arc<Tensor>>>,
    outputs: Vec<usize>,
    /// Slots to drop after each step.
    free_after: Vec<Vec<usize>>,
    /// Steps whose kernel may take operand 0's buffer (its last use, not an output).
    consumes_first: Vec<bool>,
    /// Per step: the bias/activation steps it absorbs when nothing between is watched.
    fusions: Vec<Option<Fusion>>,
    /// Per step: its (fused) 4-D result goes to one consumer only, operand 0 of a kernel that
    /// also [`kernels::Kernel::takes_channels_last`], and not out of the function: it is
    /// handed over channels last, unless an observer watches it.
    hand_off: Vec<bool>,
    /// Per step: the conv that pads by itself in place of the zero Pad before it
    /// (`pad_fusion`), and per Pad step, that conv's step.
    padded: Vec<Option<pad_fusion::PaddedConv>>,
    pad_taken_by: Vec<Option<usize>>,
    /// The ops run with a runtime's own integer numerics (`ort_x86`), in program order.
    simulated: Vec<ort_x86::Simulated>,
    /// Compiled for type inference ([`Program::compile_for_shapes`]): its large weights are
    /// zeros, so every run is shapes-only — kernels that can tell their results' shapes
    /// without the arithmetic ([`kernels::Kernel::result_shapes`]) hand over zeros of those
    /// shapes instead of computing, and nothing is fused.
    for_shapes: bool,
}

/// What [`Program::run_observed`] hands each watched value to, with its key.
type Observe<'a> = &'a mut dyn FnMut(&str, &Tensor) -> Result<(), String>;

/// Which slots to hand to the observer.
#[derive(Debug, Clone, Default)]
pub struct Watch {
    slots: HashSet<usize>,
}

pub(crate) fn quant_of(t: Type) -> Option<crate::params::QuantParams> {
    if !crate::ir::types::is_ranked_tensor(t) {
        return None;
    }
    let elem = crate::ir::types::element_type(t)?;
    params_from_type(elem, Scheme::Mlir).ok()
}

/// What a dialect table sees of `op`, with the values of its constant operands.
pub fn op_desc(op: melior::ir::OperationRef, consts: Vec<Option<Arc<Tensor>>>) -> OpDesc {
    OpDesc {
        name: op_name(&op),
        attrs: op_attrs(&op),
        operand_types: op.operands().map(|v| tensor_type(v.r#type())).collect(),
        result_types: op
            .results()
            .map(|r| tensor_type(r.r#type()))
            .collect::<Vec<Option<TensorType>>>(),
        operand_quant: op.operands().map(|v| quant_of(v.r#type())).collect(),
        result_quant: op.results().map(|r| quant_of(r.r#type())).collect(),
        consts,
    }
}

/// A kernel for `op` from the dialect tables, or why there is none.
pub fn build_kernel(op: melior::ir::OperationRef, consts: Vec<Option<Tensor>>) -> Result<Box<dyn Kernel>, String> {
    let desc = op_desc(op, consts.into_iter().map(|c| c.map(Arc::new)).collect());
    let build = builder(&desc.name).ok_or_else(|| "op not supported by the interpreter".to_string())?;
    compile_kernel(build, &desc)
}

/// The kernel `build` makes for `desc`; f16/bf16/f64 operands of a kernel written for f32 run
/// through f32 (kernels/widen.rs).
fn compile_kernel(build: tf::Builder, desc: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    Ok(Box::new(kernels::widen::FloatWidening(build(desc)?)))
}

/// The builder for an op, from every dialect table.
fn builder(name: &str) -> Option<tf::Builder> {
    tf::lookup(name)
        .or_else(|| onnx::lookup(name))
        .or_else(|| upstream::lookup(name))
}

/// True when the interpreter can run an op of this name.
pub fn supports(name: &str) -> bool {
    builder(name).is_some()
        || matches!(
            name,
            "tf.Const" | "arith.constant" | "onnx.Constant" | "onnx.NoValue" | "func.return" | "tf.NoOp"
        )
}

impl Program {
    /// Compiles function `name` (or the module's main/first public function).
    pub fn compile(module: &Module, name: Option<&str>) -> Result<Program, InterpError> {
        Self::compile_with(module, name, ort_x86::Numerics::Exact)
    }

    /// Compiles function `name` to compute its quantized ops with `numerics`.
    pub fn compile_with(
        module: &Module,
        name: Option<&str>,
        numerics: ort_x86::Numerics,
    ) -> Result<Program, InterpError> {
        Self::compile_impl(module, name, numerics, false)
    }

    fn compile_impl(
        module: &Module,
        name: Option<&str>,
        numerics: ort_x86::Numerics,
        for_shapes: bool,
    ) -> Result<Program, InterpError> {
        let func = find_function(module, name)?;
        let fname = crate::ir::graph::function_name(&func);
        let keys = TensorKeys::new(func);
        let (input_names, output_names) = entry_function_names(func);
        let block = func
            .region(0)
            .ok()
            .and_then(|r| r.first_block())
            .ok_or_else(|| IrError::Invalid(format!("@{fname} has no body")))?;
        let mut slot_of: HashMap<usize, usize> = HashMap::new();
        let mut values: Vec<ValueInfo> = Vec::new();
        let mut consts: Vec<Option<Arc<Tensor>>> = Vec::new();
        let new_slot = |v: melior::ir::Value,
                        producer: &str,
                        values: &mut Vec<ValueInfo>,
                        consts: &mut Vec<Option<Arc<Tensor>>>,
                        slot_of: &mut HashMap<usize, usize>| {
            let t = tensor_type(v.r#type());
            values.push(ValueInfo {
                key: keys.get(v).unwrap_or("?").to_string(),
                producer: producer.to_string(),
                dtype: t.as_ref().and_then(|t| t.dtype),
                dims: t.map(|t| t.dims).unwrap_or_default(),
                constant: false,
            });
            consts.push(None);
            slot_of.insert(v.to_raw().ptr as usize, values.len() - 1);
            values.len() - 1
        };
        let mut inputs = Vec::new();
        for k in 0..block.argument_count() {
            let arg = block.argument(k).map_err(|e| IrError::Invalid(e.to_string()))?;
            let v: melior::ir::Value = arg.into();
            let s = new_slot(v, "argument", &mut values, &mut consts, &mut slot_of);
            let t = tensor_type(v.r#type());
            inputs.push(InputSpec {
                name: input_names.get(k).cloned().unwrap_or_else(|| values[s].key.clone()),
                key: values[s].key.clone(),
                dtype: t.as_ref().and_then(|t| t.dtype),
                dims: t.map(|t| t.dims).unwrap_or_default(),
                r#type: crate::ir::type_text(v.r#type()),
            });
        }
        // constants read on every thread first (a shapes-only program reads few of them)
        let mut read = (!for_shapes).then(|| read_constants(func, &keys)).unwrap_or_default();
        let mut steps = Vec::new();
        let mut outputs = Vec::new();
        let mut simulated = Vec::new();
        for op in body_ops(func) {
            let name = op_name(&op);
            let loc = location_string(op.location());
            let first_key = op
                .result(0)
                .ok()
                .and_then(|r| keys.get(r.into()).map(str::to_string))
                .unwrap_or_else(|| "-".into());
            let unsupported = |reason: String| InterpError::Unsupported {
                op: name.clone(),
                loc: loc.clone(),
                key: first_key.clone(),
                reason,
            };
            if name == "func.return" {
                for v in op.operands() {
                    outputs.push(
                        *slot_of
                            .get(&(v.to_raw().ptr as usize))
                            .ok_or_else(|| unsupported("returns an unknown value".into()))?,
                    );
                }
                continue;
            }
            if op.region_count() > 0 {
                return Err(unsupported("ops with regions (control flow) are not supported".into()));
            }
            if name == crate::dialects::onnx::NO_VALUE {
                // an absent optional ONNX input: kernels see an empty tensor, and their builders
                // see no operand type (`none` is not a tensor type)
                let r = op.result(0).map_err(|e| unsupported(e.to_string()))?;
                let s = new_slot(r.into(), &name, &mut values, &mut consts, &mut slot_of);
                values[s].constant = true;
                consts[s] = Some(Arc::new(Tensor::F32(ndarray::ArrayD::zeros(ndarray::IxDyn(&[0])))));
                continue;
            }
            if is_constant_op(&op) {
                let attr = op.attribute("value").map_err(|e| unsupported(e.to_string()))?;
                let t = match for_shapes.then(|| infer_types::unread_weight(&op, attr)).flatten() {
                    Some(zeros) => zeros,
                    None => read
                        .remove(&(op.to_raw().ptr as usize))
                        .unwrap_or_else(|| attribute_to_tensor(attr, &first_key))
                        .map_err(|e| unsupported(e.to_string()))?,
                };
                let r = op.result(0).map_err(|e| unsupported(e.to_string()))?;
                let s = new_slot(r.into(), &name, &mut values, &mut consts, &mut slot_of);
                values[s].constant = true;
                consts[s] = Some(Arc::new(t));
                continue;
            }
            if name == "tf.NoOp" && op.result_count() == 0 {
                continue;
            }
            let build = builder(&name).ok_or_else(|| unsupported("op not supported by the interpreter".into()))?;
            let mut in_slots = Vec::new();
            for (i, v) in op.operands().enumerate() {
                in_slots.push(
                    *slot_of
                        .get(&(v.to_raw().ptr as usize))
                        .ok_or_else(|| unsupported(format!("operand #{i} is defined outside the function body")))?,
                );
            }
            let desc = op_desc(op, in_slots.iter().map(|&s| consts[s].clone()).collect());
            let mut kernel = compile_kernel(build, &desc).map_err(unsupported)?;
            if numerics == ort_x86::Numerics::OrtX86NoVnni {
                let const_of = |v: melior::ir::Value| {
                    slot_of
                        .get(&(v.to_raw().ptr as usize))
                        .and_then(|&s| consts[s].as_deref())
                };
                if let Some(plan) = ort_x86::plan(op, desc.consts.get(1).and_then(Option::as_deref), &const_of) {
                    let (k, sim) = ort_x86::PairSaturation::wrap(kernel, plan, first_key.clone(), name.clone());
                    kernel = k;
                    simulated.push(sim);
                }
            }
            let out_slots: Vec<usize> = op
                .results()
                .map(|r| new_slot(r.into(), &name, &mut values, &mut consts, &mut slot_of))
                .collect();
            // fold ops whose operands are all known now, once, instead of once per sample
            if !in_slots.is_empty() && in_slots.iter().all(|&s| consts[s].is_some()) {
                let args: Vec<&Tensor> = in_slots.iter().filter_map(|&s| consts[s].as_deref()).collect();
                let res = kernel.run(&args).map_err(|message| InterpError::Kernel {
                    op: name.clone(),
                    loc: loc.clone(),
                    key: first_key.clone(),
                    message,
                })?;
                for (s, t) in out_slots.iter().zip(res) {
                    values[*s].constant = true;
                    consts[*s] = Some(Arc::new(t));
                }
                continue;
            }
            steps.push(Step {
                kernel,
                inputs: in_slots,
                outputs: out_slots,
                op: name,
                loc,
            });
        }
        // liveness: drop each runtime value after its last use
        let mut last_use: Vec<Option<usize>> = vec![None; values.len()];
        for (i, st) in steps.iter().enumerate() {
            for &s in &st.inputs {
                last_use[s] = Some(i);
            }
        }
        let mut free_after = vec![Vec::new(); steps.len()];
        let outs: HashSet<usize> = outputs.iter().copied().collect();
        for (i, st) in steps.iter().enumerate() {
            for &s in st.outputs.iter() {
                if !outs.contains(&s) && last_use[s].is_none() {
                    free_after[i].push(s);
                }
            }
        }
        for (s, lu) in last_use.iter().enumerate() {
            if let Some(i) = lu {
                if consts[s].is_none() && !outs.contains(&s) {
                    free_after[*i].push(s);
                }
            }
        }
        let consumes_first: Vec<bool> = steps
            .iter()
            .enumerate()
            .map(|(i, st)| match st.inputs.first() {
                Some(&s0) => {
                    st.kernel.reuses_first_operand()
                        && consts[s0].is_none()
                        && !outs.contains(&s0)
                        && last_use[s0] == Some(i)
                        && !st.inputs[1..].contains(&s0)
                }
                None => false,
            })
            .collect();
        // compute op → [Mul(per-channel const)] → [Add (per-channel const)] → [ReLU | ReLU6],
        // at least one of them, each intermediate value used once (`fusion`'s tables)
        let uses_of = |slot: usize| steps.iter().filter(|st| st.inputs.contains(&slot)).count();
        let sole_user = |slot: usize, at: usize| -> bool {
            at < steps.len()
                && !outs.contains(&slot)
                && uses_of(slot) == 1
                && steps[at].inputs.len() <= 3
                && steps[at].inputs.first() == Some(&slot)
                && steps[at].outputs.len() == 1
        };
        let mut fusions: Vec<Option<Fusion>> = vec![None; steps.len()];
        for i in 0..steps.len() {
            let head = &steps[i];
            let Some((axis, affine)) = fusion::head(&head.op, head.inputs.len()).filter(|_| head.outputs.len() == 1)
            else {
                continue;
            };
            let per_channel =
                |slot: usize, of: usize| fusion::per_channel(consts[slot].as_deref(), &values[of].dims, axis);
            let (mut cur, mut at) = (head.outputs[0], i + 1);
            let mut f = Fusion {
                tail: vec![],
                scale: None,
                bias: None,
                act: None,
                axis,
                skipped: vec![],
                out: cur,
            };
            let take = |f: &mut Fusion, cur: &mut usize, at: &mut usize| {
                f.tail.push(*at);
                f.skipped.push(*cur);
                *cur = steps[*at].outputs[0];
                *at += 1;
            };
            let binary = |at: usize| steps[at].inputs.len() == 2;
            if affine
                && sole_user(cur, at)
                && fusion::SCALES.contains(&steps[at].op.as_str())
                && binary(at)
                && per_channel(steps[at].inputs[1], cur)
            {
                f.scale = Some(steps[at].inputs[1]);
                take(&mut f, &mut cur, &mut at);
            }
            if affine
                && sole_user(cur, at)
                && fusion::BIASES.contains(&steps[at].op.as_str())
                && binary(at)
                && per_channel(steps[at].inputs[1], cur)
            {
                f.bias = Some(steps[at].inputs[1]);
                take(&mut f, &mut cur, &mut at);
            }
            if sole_user(cur, at) {
                let bounds: Vec<Option<&Tensor>> =
                    steps[at].inputs[1..].iter().map(|&s| consts[s].as_deref()).collect();
                if let Some(act) = fusion::activation(&steps[at].op, &bounds) {
                    f.act = Some(act);
                    take(&mut f, &mut cur, &mut at);
                }
            }
            if !f.tail.is_empty() {
                f.out = cur;
                fusions[i] = Some(f);
            }
        }
        // conv → conv, and residual paths between convs: values held channels last
        let hand_off = layout_plan::channels_last_results(&steps, &values, &fusions, &outs);
        let (padded, pad_taken_by) = pad_fusion::padded_convs(&steps, &consts, &outs);
        let output_names = if output_names.len() == outputs.len() {
            output_names
        } else {
            outputs.iter().map(|&s| values[s].key.clone()).collect()
        };
        Ok(Program {
            function: fname,
            inputs,
            output_names,
            values,
            steps,
            consts,
            outputs,
            free_after,
            consumes_first,
            fusions,
            hand_off,
            padded,
            pad_taken_by,
            simulated,
            for_shapes,
        })
    }

    /// The ops computed with a runtime's integer numerics, with what they did in the runs so
    /// far (empty with exact numerics).
    pub fn simulated(&self) -> Vec<ort_x86::SimulatedOp> {
        self.simulated.iter().map(ort_x86::Simulated::snapshot).collect()
    }

    /// Slots of the given keys, for [`Program::run_observed`].
    pub fn watch(&self, keys: &[String]) -> Result<Watch, InterpError> {
        let by_key: HashMap<&str, usize> = self
            .values
            .iter()
            .enumerate()
            .map(|(i, v)| (v.key.as_str(), i))
            .collect();
        let mut slots = HashSet::new();
        for k in keys {
            let s = by_key.get(k.as_str()).ok_or_else(|| InterpError::UnknownKey {
                key: k.clone(),
                function: self.function.clone(),
            })?;
            slots.insert(*s);
        }
        Ok(Watch { slots })
    }

    /// Checks a sample against the signature.
    pub fn check_inputs(&self, inputs: &[Tensor]) -> Result<(), InterpError> {
        if inputs.len() != self.inputs.len() {
            return Err(InterpError::InputCount {
                expected: self.inputs.len(),
                found: inputs.len(),
            });
        }
        for (spec, t) in self.inputs.iter().zip(inputs) {
            spec.check(t)?;
        }
        Ok(())
    }

    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, InterpError> {
        self.run_observed(inputs, &Watch::default(), &mut |_, _| Ok(()))
    }

    /// Runs one sample; `observe(key, value)` is called for every watched runtime value right
    /// after it is computed (constants do not vary with samples and are not observed).
    pub fn run_observed(&self, inputs: &[Tensor], watch: &Watch, observe: Observe) -> Result<Vec<Tensor>, InterpError> {
        self.run_observed_owned(inputs.to_vec(), watch, observe)
    }

    /// [`Program::run_observed`] on inputs the run may keep: a sample read for this run alone
    /// is not copied, and an op that takes its buffer (Identity, an in-place elementwise op)
    /// can take the input's.
    pub fn run_observed_owned(
        &self,
        inputs: Vec<Tensor>,
        watch: &Watch,
        observe: Observe,
    ) -> Result<Vec<Tensor>, InterpError> {
        self.check_inputs(&inputs)?;
        let mut env: Vec<Option<Tensor>> = vec![None; self.values.len()];
        for (i, t) in inputs.into_iter().enumerate() {
            self.observe_slot(watch, observe, i, &t)?;
            env[i] = Some(t);
        }
        let mut absorbed_until = 0usize;
        // slots whose value is held channels last (handed from one conv to the next)
        let mut channels_last = vec![false; self.values.len()];
        for (i, st) in self.steps.iter().enumerate() {
            if self.pad_taken_by[i].is_some_and(|j| self.pad_taken(j, watch).is_some()) {
                continue; // the conv after it pads by itself
            }
            let padded = self.pad_taken(i, watch);
            let (kernel, inputs) = pad_fusion::kernel_and_inputs(padded, st);
            // what dies at a Pad taken by this conv dies after it
            let pad_frees = padded.map_or(&[][..], |pc| &self.free_after[pc.pad_step]);
            let frees = || self.free_after[i].iter().chain(pad_frees);
            let input_last = inputs.first().is_some_and(|&s| channels_last[s]);
            if i < absorbed_until {
                // absorbed into a fused step: only its bookkeeping remains
                for &s in &self.free_after[i] {
                    env[s] = None;
                }
                continue;
            }
            if let Some(f) = self.fusions[i]
                .as_ref()
                .filter(|f| !self.for_shapes && !f.skipped.iter().any(|s| watch.slots.contains(s)))
            {
                let args: Vec<&Tensor> = inputs
                    .iter()
                    .map(|&s| self.consts[s].as_deref().or(env[s].as_ref()))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| self.kernel_error(st, "an operand was not computed".into()))?;
                let vec_of = |slot: Option<usize>| {
                    slot.and_then(|s| self.consts[s].as_deref())
                        .and_then(Tensor::as_f32)
                        .and_then(|a| a.as_slice())
                };
                let ep = kernels::epilogue::Epilogue {
                    scale: vec_of(f.scale),
                    bias: vec_of(f.bias),
                    act: f.act,
                };
                let layout = kernels::ChannelsLast {
                    input: input_last,
                    output: self.hand_off[i] && !watch.slots.contains(&f.out),
                };
                let (mut res, applied) = if layout != kernels::ChannelsLast::default() {
                    let r = kernel.run_channels_last(&args, Some(&ep), layout);
                    (r.map_err(|m| self.kernel_error(st, m))?, true)
                } else {
                    match kernel.run_fused(&args, &ep) {
                        Some(r) => (r.map_err(|m| self.kernel_error(st, m))?, true),
                        None => (kernel.run(&args).map_err(|m| self.kernel_error(st, m))?, false),
                    }
                };
                channels_last[f.out] = layout.output;
                let Some(Tensor::F32(mut y)) = res.pop() else {
                    return Err(self.kernel_error(st, "fused epilogue on a non-f32 value".into()));
                };
                if !applied {
                    let axis = match f.axis {
                        fusion::ChannelAxis::Second => 1,
                        fusion::ChannelAxis::Last => y.ndim().saturating_sub(1),
                    };
                    ep.apply_on_axis(&mut y, axis).map_err(|m| self.kernel_error(st, m))?;
                }
                let t = Tensor::F32(y);
                self.observe_slot(watch, observe, f.out, &t)?;
                env[f.out] = Some(t);
                for &s in frees() {
                    env[s] = None;
                }
                absorbed_until = f.tail.last().map_or(i + 1, |&t| t + 1);
                continue;
            }
            let keep_last = self.hand_off[i]
                && self.fusions[i].is_none()
                && st.outputs.first().is_some_and(|s| !watch.slots.contains(s));
            // an elementwise op over channels-last operands (layout_plan)
            let operand = |s: usize| self.consts[s].as_deref().or(env[s].as_ref());
            let flagged: Option<Vec<(&Tensor, bool)>> = match kernel.layout_free() {
                true => inputs.iter().map(|&s| Some((operand(s)?, channels_last[s]))).collect(),
                false => None,
            };
            let free = flagged.as_deref().and_then(|a| layout_plan::operands_last(a));
            let layout = kernels::ChannelsLast {
                input: input_last && free.is_none(),
                output: keep_last && (free == Some(true) || kernel.takes_channels_last()),
            };
            let shaped = match self.for_shapes && layout == kernels::ChannelsLast::default() && free.is_none() {
                true => self.zeros_shaped_like_results(st, &env),
                false => None,
            };
            let res = match (shaped, free, flagged) {
                (Some(zeros), ..) => zeros,
                (None, Some(false), Some(a)) => {
                    layout_plan::run_in_nchw(kernel, &a).map_err(|m| self.kernel_error(st, m))?
                }
                _ => {
                    // operand 0 dies here and is not used twice by this op: hand its buffer over
                    let owned = match inputs.first() {
                        Some(&s0) if self.consumes_first[i] && padded.is_none() => env[s0].take(),
                        _ => None,
                    };
                    let skip = owned.is_some() as usize;
                    let args: Vec<&Tensor> = inputs[skip..]
                        .iter()
                        .map(|&s| self.consts[s].as_deref().or(env[s].as_ref()))
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| self.kernel_error(st, "an operand was not computed".into()))?;
                    layout_plan::run_in(kernel, owned, &args, layout, free).map_err(|m| self.kernel_error(st, m))?
                }
            };
            if let Some(&s) = st.outputs.first() {
                channels_last[s] = layout.output;
            }
            if res.len() != st.outputs.len() {
                return Err(self.kernel_error(
                    st,
                    format!("produced {} results, expected {}", res.len(), st.outputs.len()),
                ));
            }
            for (&s, t) in st.outputs.iter().zip(res) {
                self.observe_slot(watch, observe, s, &t)?;
                env[s] = Some(t);
            }
            for &s in frees() {
                env[s] = None;
            }
        }
        self.outputs
            .iter()
            .map(|&s| {
                self.consts[s]
                    .as_deref()
                    .cloned()
                    .or_else(|| env[s].take())
                    .ok_or_else(|| InterpError::Kernel {
                        op: "func.return".into(),
                        loc: String::new(),
                        key: self.values[s].key.clone(),
                        message: "result was not computed".into(),
                    })
            })
            .collect()
    }

    /// Hands a watched slot's value to the observer.
    fn observe_slot(&self, watch: &Watch, observe: Observe, s: usize, t: &Tensor) -> Result<(), InterpError> {
        match watch.slots.contains(&s) {
            true => observe(&self.values[s].key, t).map_err(|message| InterpError::Observer {
                key: self.values[s].key.clone(),
                message,
            }),
            false => Ok(()),
        }
    }

    fn kernel_error(&self, st: &Step, message: String) -> InterpError {
        let key = st
            .outputs
            .first()
            .map(|&s| self.values[s].key.clone())
            .unwrap_or_default();
        InterpError::Kernel {
            op: st.op.clone(),
            loc: st.loc.clone(),
            key,
            message,
        }
    }

    /// Every value known at compile time (constants and folded values), by key.
    pub fn constant_values(&self) -> impl Iterator<Item = (&str, &Tensor)> {
        self.values
            .iter()
            .zip(&self.consts)
            .filter_map(|(v, c)| c.as_deref().map(|t| (v.key.as_str(), t)))
    }

    /// How many zero Pads convolutions take as padding of their own when nothing watches
    /// their results (`pad_fusion`).
    pub fn pads_taken(&self) -> usize {
        self.padded.iter().flatten().count()
    }

    /// Number of steps whose result the plan holds channels last (`layout_plan`).
    pub fn results_held_channels_last(&self) -> usize {
        self.hand_off.iter().filter(|&&h| h).count()
    }

    /// Number of ops run per sample (after folding).
    pub fn step_count(&self) -> usize {
        self.steps.len()
    }

    /// The op producing each runtime step, in order (for reports).
    pub fn step_ops(&self) -> impl Iterator<Item = (&str, &[usize])> {
        self.steps.iter().map(|s| (s.op.as_str(), s.outputs.as_slice()))
    }
}
