//! Zero pads taken into the convolution after them: an ONNX `Pad` that only adds zeros
//! around the spatial axes of a value that one convolution alone reads is not run; the
//! convolution pads by itself (its kernels skip the taps that would fall on those zeros), so
//! the padded copy is neither zero-filled nor written. Exporters from TensorFlow write such a
//! Pad before every strided or depthwise conv (tf2onnx: MobileNet's 4 stride-2 convs and more).
//!
//! ```text
//! %p = onnx.Pad(%x, %pads)            // pads [0, 0, 1, 1, 0, 0, 1, 1], constant 0
//! %y = onnx.Conv(%p, %w) {pads = [0, 0, 0, 0]}
//!   runs as onnx.Conv(%x, %w) {pads = [1, 1, 1, 1]}
//! ```
//!
//! Only where nothing watches the Pad's result in that run (calibration observes the values
//! it quantizes as the model computes them).

use super::kernels::Kernel;
use super::{Program, Step, Watch};
use crate::tensor::Tensor;
use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;

/// A convolution that takes the Pad before it as its own padding.
pub(super) struct PaddedConv {
    /// The Pad's step, its operand (what the conv reads instead) and its result (not made).
    pub pad_step: usize,
    pub input: usize,
    pub skipped: usize,
    /// The conv with the Pad's zeros added to its own padding.
    pub kernel: Box<dyn Kernel>,
}

/// Per step: the padded form of a conv whose operand 0 is a zero Pad's result that no other
/// op reads and that the function does not return; and per Pad step, that conv's step.
pub(super) fn padded_convs(
    steps: &[Step],
    consts: &[Option<Arc<Tensor>>],
    outs: &HashSet<usize>,
) -> (Vec<Option<PaddedConv>>, Vec<Option<usize>>) {
    let mut found: Vec<Option<PaddedConv>> = (0..steps.len()).map(|_| None).collect();
    let mut taken_by = vec![None; steps.len()];
    for (i, pad) in steps.iter().enumerate() {
        let (&[x, ..], &[p]) = (pad.inputs.as_slice(), pad.outputs.as_slice()) else {
            continue;
        };
        let rest: Vec<Option<&Tensor>> = pad.inputs[1..].iter().map(|&s| consts[s].as_deref()).collect();
        let Some(extra) = pad.kernel.zero_spatial_pads(&rest) else {
            continue;
        };
        let users: Vec<usize> = (i + 1..steps.len()).filter(|&j| steps[j].inputs.contains(&p)).collect();
        let &[j] = users.as_slice() else { continue };
        let conv = &steps[j];
        if outs.contains(&p) || conv.inputs[0] != p || conv.inputs[1..].contains(&p) {
            continue;
        }
        if let Some(kernel) = conv.kernel.padded(extra) {
            taken_by[i] = Some(j);
            found[j] = Some(PaddedConv {
                pad_step: i,
                input: x,
                skipped: p,
                kernel,
            });
        }
    }
    (found, taken_by)
}

impl Program {
    /// The padded form of step `j`'s conv when it takes the Pad before it in this run: not in
    /// a shapes-only run, nor when the Pad's result is watched.
    pub(super) fn pad_taken(&self, j: usize, watch: &Watch) -> Option<&PaddedConv> {
        self.padded[j]
            .as_ref()
            .filter(|pc| !self.for_shapes && !watch.slots.contains(&pc.skipped))
    }
}

/// The kernel and operand slots step `st` runs with: its own, or the padded conv's, which
/// reads the Pad's operand in place of its result.
pub(super) fn kernel_and_inputs<'a>(
    padded: Option<&'a PaddedConv>,
    st: &'a Step,
) -> (&'a dyn Kernel, Cow<'a, [usize]>) {
    match padded {
        Some(pc) => (&*pc.kernel, [pc.input].iter().chain(&st.inputs[1..]).copied().collect()),
        None => (&*st.kernel, Cow::Borrowed(&st.inputs)),
    }
}
