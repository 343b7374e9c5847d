//! Which values the program holds channels last: the values handed between the kernels that
//! take NHWC buffers (convolutions, Transpose, Pad: [`Kernel::takes_channels_last`]) and,
//! through elementwise ops between them ([`Kernel::layout_free`]), the residual paths of an
//! NCHW model, so that a block's output is neither written with its channels transposed nor
//! copied back into rows by the next convolution.
//!
//! ```text
//!   x ─ conv 1×1 ─ conv dw ─ conv 1×1 ─ p ─┐
//!   └──────────────────────────────────────Add ─ y ─ conv 1×1 …   (x, p and y held NHWC)
//!                                                └── Add …
//! ```
//!
//! The plan is what the program may do; at run time a value an observer watches is held as
//! the model says (NCHW), and an elementwise op whose operands then differ in layout reads the
//! channels-last ones back in NCHW order ([`nchw`]).

use super::kernels::{ChannelsLast, Kernel};
use super::{Fusion, Step, ValueInfo};
use crate::ir::types::Dim;
use crate::tensor::{DType, Tensor};
use std::collections::HashSet;

/// Per step: its (fused) result is held channels last. A value qualifies when it is an f32
/// value of rank 4 that leaves no function, its producer can write it channels last (a
/// channels-last kernel reading an f32 value, or a layout-free op all of whose rank-4 operands
/// qualify and have its shape, every other operand holding one value), and each of its users
/// reads it channels last (as the one operand 0 of a channels-last kernel, or as an operand
/// of a layout-free op whose result qualifies). Removing values that fail until none does
/// leaves the largest such set.
pub(super) fn channels_last_results(
    steps: &[Step],
    values: &[ValueInfo],
    fusions: &[Option<Fusion>],
    outs: &HashSet<usize>,
) -> Vec<bool> {
    // steps run inside a fused step before them: their results are the fused step's
    let absorbed: HashSet<usize> = fusions.iter().flatten().flat_map(|f| f.tail.iter().copied()).collect();
    let result = |i: usize| -> Option<usize> {
        if absorbed.contains(&i) {
            return None;
        }
        let out = fusions[i]
            .as_ref()
            .map_or(steps[i].outputs.first().copied(), |f| Some(f.out));
        out.filter(|_| steps[i].outputs.len() == 1)
    };
    let f32_value = |s: usize| values[s].dtype == Some(DType::F32);
    let one_value = |s: usize| values[s].dims.iter().all(|d| *d == Dim::Static(1));
    let mut producer = vec![None; values.len()];
    for i in 0..steps.len() {
        if let Some(out) = result(i) {
            producer[out] = Some(i);
        }
    }
    let mut last: Vec<bool> = (0..steps.len())
        .map(|i| {
            let k = &steps[i].kernel;
            result(i).is_some_and(|out| {
                values[out].dims.len() == 4
                    && f32_value(out)
                    && !outs.contains(&out)
                    && (k.layout_free()
                        || k.takes_channels_last() && steps[i].inputs.first().is_some_and(|&s| f32_value(s)))
            })
        })
        .collect();
    // the steps after each step that read its result, each once
    let mut users: Vec<Vec<usize>> = vec![vec![]; steps.len()];
    for (j, st) in steps.iter().enumerate() {
        for &s in &st.inputs {
            if let Some(i) = producer[s].filter(|&i| i < j && users[i].last() != Some(&j)) {
                users[i].push(j);
            }
        }
    }
    loop {
        let mut changed = false;
        for i in 0..steps.len() {
            if !last[i] {
                continue;
            }
            let Some(out) = result(i) else { continue };
            let operands_qualify = !steps[i].kernel.layout_free()
                || steps[i].inputs.iter().all(|&s| match producer[s] {
                    Some(p) if values[s].dims.len() == 4 => last[p] && values[s].dims == values[out].dims,
                    _ => one_value(s),
                });
            let users_read_it = users[i].iter().all(|&j| {
                let k = &steps[j].kernel;
                match k.layout_free() {
                    true => last[j],
                    false => {
                        k.takes_channels_last()
                            && steps[j].inputs[0] == out
                            && steps[j].inputs.iter().filter(|&&s| s == out).count() == 1
                    }
                }
            });
            if !(operands_qualify && users_read_it) {
                last[i] = false;
                changed = true;
            }
        }
        if !changed {
            return last;
        }
    }
}

/// Runs `kernel` on operand 0's buffer where it is handed over (`owned`) and `args`, laid out
/// as `layout` says. A layout-free op over channels-last operands (`free`: [`operands_last`])
/// runs on the buffers as they are; its result is read back in NCHW order unless it stays
/// channels last.
pub(super) fn run_in(
    kernel: &dyn Kernel,
    owned: Option<Tensor>,
    args: &[&Tensor],
    layout: ChannelsLast,
    free: Option<bool>,
) -> Result<Vec<Tensor>, String> {
    let plain = free.is_some() || layout == ChannelsLast::default();
    let res = match owned {
        Some(first) if plain => kernel.run_owned(first, args),
        Some(first) => kernel.run_owned_channels_last(first, args, layout),
        None if plain => kernel.run(args),
        None => kernel.run_channels_last(args, None, layout),
    }?;
    match free == Some(true) && !layout.output {
        true => res.iter().map(nchw).collect(),
        false => Ok(res),
    }
}

/// `t`, computed channels last, in the model's NCHW order.
pub(super) fn nchw(t: &Tensor) -> Result<Tensor, String> {
    super::kernels::layout::transpose(t, &[0, 3, 1, 2])
}

/// A layout-free op whose operands differ in layout (an observer watches some of them): the
/// channels-last ones are read back in NCHW order and the op runs as the model says.
pub(super) fn run_in_nchw(kernel: &dyn Kernel, args: &[(&Tensor, bool)]) -> Result<Vec<Tensor>, String> {
    let copies: Vec<Option<Tensor>> = args
        .iter()
        .map(|&(t, last)| last.then(|| nchw(t)).transpose())
        .collect::<Result<_, _>>()?;
    let operands: Vec<&Tensor> = args
        .iter()
        .zip(&copies)
        .map(|(&(t, _), c)| c.as_ref().unwrap_or(t))
        .collect();
    kernel.run(&operands)
}

/// How a layout-free step's operands `args` (each with whether it is held channels last) stand
/// at run time: `Some(true)` when every rank-4 operand is held channels last and they have one
/// shape (it runs on the buffers as they are), `Some(false)` when only some are (they are read
/// back in NCHW order first), `None` when none is.
pub(super) fn operands_last(args: &[(&Tensor, bool)]) -> Option<bool> {
    if !args.iter().any(|&(_, last)| last) {
        return None;
    }
    let four: Vec<&(&Tensor, bool)> = args
        .iter()
        .filter(|(t, _)| t.shape().len() == 4 && t.len() > 1)
        .collect();
    let shape = four.first().map(|(t, _)| t.shape());
    Some(
        four.iter().all(|(t, last)| *last && Some(t.shape()) == shape)
            && args
                .iter()
                .all(|(t, _)| t.len() == 1 || (t.shape().len() == 4 && Some(t.shape()) == shape)),
    )
}
