//! The ONNX table's layout builders: Split, Slice, Unsqueeze, ArgMax/ArgMin, Pad and Range.

use super::*;

pub(super) fn split(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let axis = d.int_attr("axis", 0);
    let attr = d.ints_attr("split");
    let n_out = d.result_types.len() as i64;
    let num_outputs = d.attr("num_outputs").and_then(|a| a.as_int()).unwrap_or(n_out);
    Ok(Box::new(FnKernel(move |x: &[&Tensor]| {
        let sizes = match (&attr, opt_ints(x, 1)?) {
            (Some(s), _) => s.clone(),
            (None, Some(s)) => s,
            (None, None) => {
                let a = norm_axis(axis, x[0].shape().len())?;
                let dim = x[0].shape()[a] as i64;
                let n = num_outputs.max(1);
                let chunk = (dim + n - 1) / n;
                (0..n).map(|i| chunk.min(dim - i * chunk).max(0)).collect()
            }
        };
        join::split(x[0], axis, &sizes)
    })))
}

/// ONNX Slice: per listed axis, start/end clamped to the dim, any non-zero step.
pub(super) fn slice(
    t: &Tensor,
    starts: &[i64],
    ends: &[i64],
    axes: Option<&[i64]>,
    steps: Option<&[i64]>,
) -> KernelResult<Tensor> {
    let r = t.shape().len();
    let mut begin = vec![0i64; r];
    let mut end: Vec<i64> = t.shape().iter().map(|&d| d as i64).collect();
    let mut stride = vec![1i64; r];
    let default_axes: Vec<i64> = (0..starts.len() as i64).collect();
    let axes = axes.unwrap_or(&default_axes);
    if starts.len() != ends.len() || axes.len() != starts.len() {
        return Err("starts, ends and axes differ in length".into());
    }
    for (i, &ax) in axes.iter().enumerate() {
        let a = norm_axis(ax, r)?;
        let dim = t.shape()[a] as i64;
        let step = steps.and_then(|s| s.get(i).copied()).unwrap_or(1);
        if step == 0 {
            return Err("Slice step 0".into());
        }
        let fix = |v: i64| if v < 0 { v + dim } else { v };
        let (s, e) = (fix(starts[i]), fix(ends[i]));
        if step > 0 {
            begin[a] = s.clamp(0, dim);
            end[a] = e.clamp(0, dim);
        } else {
            begin[a] = s.clamp(-1, dim - 1);
            end[a] = e.clamp(-1, dim - 1);
        }
        stride[a] = step;
    }
    // the strided slice with explicit bounds on every axis; a negative end (-1) means "before
    // index 0", which the end mask expresses
    let mut end_mask = 0i64;
    for a in 0..r {
        if stride[a] < 0 && end[a] < 0 {
            end_mask |= 1 << a;
        }
    }
    layout::strided_slice(
        t,
        &begin,
        &end,
        &stride,
        layout::StridedMasks {
            begin: 0,
            end: end_mask,
            ellipsis: 0,
            new_axis: 0,
            shrink_axis: 0,
        },
    )
}

pub(super) fn unsqueeze(t: &Tensor, axes: &[i64]) -> KernelResult<Tensor> {
    let out_rank = t.shape().len() + axes.len();
    let mut ax: Vec<usize> = axes
        .iter()
        .map(|&a| norm_axis(a, out_rank))
        .collect::<KernelResult<_>>()?;
    ax.sort_unstable();
    let mut shape = Vec::with_capacity(out_rank);
    let mut src = t.shape().iter();
    for i in 0..out_rank {
        if ax.binary_search(&i).is_ok() {
            shape.push(1i64);
        } else {
            shape.push(*src.next().ok_or("Unsqueeze axes out of range")? as i64);
        }
    }
    layout::reshape(t, &shape, false)
}

pub(super) fn arg_op(d: &OpDesc, max: bool) -> Result<Box<dyn Kernel>, String> {
    let axis = d.int_attr("axis", 0);
    let keep = d.int_attr("keepdims", 1) != 0;
    let last = d.int_attr("select_last_index", 0) != 0;
    Ok(one(move |x| {
        crate::interp::kernels::reduce::arg_extreme(x[0], axis, max, last, keep)
    }))
}

pub(super) fn pad(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    Ok(Box::new(Pad {
        mode: d.choice("mode", &["constant", "reflect", "edge", "wrap"], "constant")?,
        attr_pads: d.ints_attr("pads"),
        attr_value: d.f64_attr("value", 0.0),
    }))
}

/// ONNX Transpose; next to a convolution it reads or writes the channels-last value, which
/// is one more permutation folded into its own (an NHWC model input transposed to NCHW for a
/// conv becomes a plain copy).
pub(super) struct Transpose {
    pub perm: Option<Vec<i64>>,
}

impl Transpose {
    /// The permutation of the value's rank-`r` axes (reversed when the op names none).
    fn perm_of(&self, r: usize) -> Vec<i64> {
        self.perm.clone().unwrap_or_else(|| (0..r as i64).rev().collect())
    }

    /// The permutation of the buffer's axes when operand 0 and the result are held as `layout`
    /// says.
    fn physical(&self, x: &Tensor, layout: crate::interp::kernels::ChannelsLast) -> KernelResult<Vec<i64>> {
        let r = x.shape().len();
        let p = self.perm_of(r);
        if r != 4 || p.len() != 4 {
            return Err(format!(
                "a channels-last Transpose needs 4-D values, got shape {:?}",
                x.shape()
            ));
        }
        let p: Vec<usize> = p.iter().map(|&a| norm_axis(a, 4)).collect::<KernelResult<_>>()?;
        // physical output axis k is logical output axis q_out[k] = logical input axis
        // p[q_out[k]], held at physical input axis (q_in⁻¹)[p[q_out[k]]]
        let q_out = if layout.output { NHWC_AXES } else { [0, 1, 2, 3] };
        let q_in_inv = if layout.input { [0, 3, 1, 2] } else { [0, 1, 2, 3] };
        Ok(q_out.iter().map(|&k| q_in_inv[p[k]] as i64).collect())
    }
}

/// True when `p` leaves every axis where it is.
fn is_identity(p: &[i64]) -> bool {
    p.iter().enumerate().all(|(k, &a)| a == k as i64)
}

impl Kernel for Transpose {
    fn run(&self, x: &[&Tensor]) -> KernelResult<Vec<Tensor>> {
        let p = self.perm_of(x[0].shape().len());
        Ok(vec![layout::transpose(x[0], &p)?])
    }

    // a permutation that moves nothing hands its operand's buffer on: the NHWC → NCHW
    // Transpose at the input of a tf2onnx export, whose result the first conv takes back
    // channels last, is then no copy of the image
    fn run_owned(&self, first: Tensor, _rest: &[&Tensor]) -> KernelResult<Vec<Tensor>> {
        let p = self.perm_of(first.shape().len());
        match is_identity(&p) && p.len() == first.shape().len() {
            true => Ok(vec![first]),
            false => Ok(vec![layout::transpose(&first, &p)?]),
        }
    }

    fn reuses_first_operand(&self) -> bool {
        true
    }

    fn takes_channels_last(&self) -> bool {
        true
    }

    fn run_channels_last(
        &self,
        x: &[&Tensor],
        _ep: Option<&crate::interp::kernels::epilogue::Epilogue>,
        layout: crate::interp::kernels::ChannelsLast,
    ) -> KernelResult<Vec<Tensor>> {
        let phys = self.physical(x[0], layout)?;
        Ok(vec![layout::transpose(x[0], &phys)?])
    }

    fn run_owned_channels_last(
        &self,
        first: Tensor,
        _rest: &[&Tensor],
        layout: crate::interp::kernels::ChannelsLast,
    ) -> KernelResult<Vec<Tensor>> {
        let phys = self.physical(&first, layout)?;
        match is_identity(&phys) {
            true => Ok(vec![first]),
            false => Ok(vec![layout::transpose(&first, &phys)?]),
        }
    }
}

/// ONNX Pad; between two convolutions it pads a channels-last value in place of its NCHW
/// original (the pads permuted with it), so the value is not transposed around it.
struct Pad {
    mode: String,
    attr_pads: Option<Vec<i64>>,
    attr_value: f64,
}

/// NCHW axes in NHWC order.
const NHWC_AXES: [usize; 4] = [0, 2, 3, 1];

impl Pad {
    /// TensorFlow-style `[[begin, end], ...]` paddings of a value of rank `r`.
    fn paddings(&self, x: &[&Tensor], r: usize) -> KernelResult<Vec<i64>> {
        let pads = match &self.attr_pads {
            Some(p) => p.clone(),
            None => int_arg(x, 1)?,
        };
        let axes: Vec<usize> = match opt_ints(x, 3)? {
            Some(a) => a.iter().map(|&v| norm_axis(v, r)).collect::<KernelResult<_>>()?,
            None => (0..r).collect(),
        };
        if pads.len() != 2 * axes.len() {
            return Err(format!("{} pads for {} axes", pads.len(), axes.len()));
        }
        // ONNX [b0, b1, ..., e0, e1, ...] → TF [[b0, e0], [b1, e1], ...]
        let mut tf = vec![0i64; 2 * r];
        for (i, &a) in axes.iter().enumerate() {
            tf[2 * a] = pads[i];
            tf[2 * a + 1] = pads[axes.len() + i];
        }
        Ok(tf)
    }

    fn apply(&self, x: &[&Tensor], t: &Tensor, tf: &[i64]) -> KernelResult<Tensor> {
        match self.mode.as_str() {
            "reflect" => return layout::mirror_pad(t, tf, false),
            "edge" | "wrap" => return index_pad(t, tf, self.mode == "wrap"),
            _ => {}
        }
        let value = match x.get(2) {
            Some(v) if !v.is_empty() => scalar_f32(v)? as f64,
            _ => self.attr_value,
        };
        layout::pad(t, tf, value)
    }
}

impl Kernel for Pad {
    fn run(&self, x: &[&Tensor]) -> KernelResult<Vec<Tensor>> {
        let tf = self.paddings(x, x[0].shape().len())?;
        Ok(vec![self.apply(x, x[0], &tf)?])
    }

    fn takes_channels_last(&self) -> bool {
        true
    }

    fn zero_spatial_pads(&self, rest: &[Option<&Tensor>]) -> Option<[(usize, usize); 2]> {
        if self.mode != "constant" {
            return None;
        }
        let none = Tensor::F32(ndarray::ArrayD::zeros(ndarray::IxDyn(&[0])));
        let x: Vec<&Tensor> = std::iter::once(Some(&none))
            .chain(rest.iter().copied())
            .collect::<Option<_>>()?;
        let value = match x.get(2) {
            Some(v) if !v.is_empty() => scalar_f32(v).ok()?,
            _ => self.attr_value as f32,
        };
        let tf = self.paddings(&x, 4).ok()?;
        let spatial = |i: usize| usize::try_from(tf[i]).ok();
        match (value == 0.0, &tf[..4]) {
            (true, [0, 0, 0, 0]) => Some([(spatial(4)?, spatial(5)?), (spatial(6)?, spatial(7)?)]),
            _ => None,
        }
    }

    fn run_channels_last(
        &self,
        x: &[&Tensor],
        _ep: Option<&crate::interp::kernels::epilogue::Epilogue>,
        layout: crate::interp::kernels::ChannelsLast,
    ) -> KernelResult<Vec<Tensor>> {
        if x[0].shape().len() != 4 {
            return Err(format!(
                "a channels-last Pad needs a 4-D value, got shape {:?}",
                x[0].shape()
            ));
        }
        let tf = self.paddings(x, 4)?;
        let (to_last, to_first) = ([0, 2, 3, 1], [0, 3, 1, 2]);
        let y = if layout.input {
            let nhwc: Vec<i64> = NHWC_AXES.iter().flat_map(|&a| [tf[2 * a], tf[2 * a + 1]]).collect();
            let y = self.apply(x, x[0], &nhwc)?;
            if layout.output {
                y
            } else {
                layout::transpose(&y, &to_first)?
            }
        } else {
            let y = self.apply(x, x[0], &tf)?;
            if layout.output {
                layout::transpose(&y, &to_last)?
            } else {
                y
            }
        };
        Ok(vec![y])
    }
}

pub(super) fn range(x: &[&Tensor]) -> KernelResult<Tensor> {
    let s = layout::cast(x[0], DType::F64)?;
    let l = layout::cast(x[1], DType::F64)?;
    let dl = layout::cast(x[2], DType::F64)?;
    let g = |t: &Tensor| -> KernelResult<f64> {
        match t {
            Tensor::F64(a) if a.len() == 1 => Ok(a.iter().next().copied().unwrap_or(0.0)),
            _ => Err("Range operands must be scalars".into()),
        }
    };
    let (s, l, dl) = (g(&s)?, g(&l)?, g(&dl)?);
    if dl == 0.0 {
        return Err("Range with delta 0".into());
    }
    let n = ((l - s) / dl).ceil().max(0.0) as usize;
    let v: Vec<f64> = (0..n).map(|i| s + i as f64 * dl).collect();
    layout::cast(&Tensor::F64(crate::interp::kernels::from_vec(&[n], v)?), x[0].dtype())
}

/// EyeLike: a 2-D tensor shaped like the input, ones on diagonal `k`, of type `dtype` (the
/// input's when absent).
pub(super) fn eye_like(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let k = d.int_attr("k", 0);
    let to = match d.attr("dtype").and_then(|a| a.as_int()) {
        Some(t) => Some(crate::dialects::onnx_types::dtype_of(t as i32).ok_or_else(|| format!("EyeLike dtype {t}"))?),
        None => None,
    };
    Ok(one(move |x| {
        let [r, c] = x[0].shape()[..] else {
            return Err(format!("EyeLike of shape {:?}: 2-D only", x[0].shape()));
        };
        let eye = ArrayD::from_shape_fn(IxDyn(&[r, c]), |i| f64::from(u8::from(i[1] as i64 - i[0] as i64 == k)));
        layout::cast(&Tensor::F64(eye), to.unwrap_or(x[0].dtype()))
    }))
}

pub(super) fn gather_nd_op(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let b = d.int_attr("batch_dims", 0);
    if b < 0 {
        return Err(format!("batch_dims = {b}"));
    }
    Ok(one(move |x| gather_nd(x[0], x[1], b as usize)))
}

pub(super) fn scatter_nd_op(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let r = Reduction::parse(d.str_attr("reduction").unwrap_or("none"))?;
    Ok(one(move |x| scatter_nd(x[0], x[1], x[2], r)))
}

pub(super) fn scatter_elements_op(d: &OpDesc) -> Result<Box<dyn Kernel>, String> {
    let (axis, r) = (
        d.int_attr("axis", 0),
        Reduction::parse(d.str_attr("reduction").unwrap_or("none"))?,
    );
    Ok(one(move |x| scatter_elements(x[0], x[1], x[2], axis, r)))
}

/// Edge or wrap padding (TF-ordered pads [[b0, e0], ...], negative ones crop): each output
/// index along an axis reads the nearest input index (edge) or the one a period away (wrap).
fn index_pad(t: &Tensor, pads: &[i64], wrap: bool) -> KernelResult<Tensor> {
    let mut cur = t.clone();
    for axis in 0..t.shape().len() {
        let (b, e) = (pads[2 * axis], pads[2 * axis + 1]);
        if b == 0 && e == 0 {
            continue;
        }
        let n = cur.shape()[axis] as i64;
        let len = n + b + e;
        if n == 0 || len < 0 {
            return Err(format!("cannot pad a dim of {n} by ({b}, {e})"));
        }
        let idx: Vec<i64> = (0..len)
            .map(|i| {
                if wrap {
                    (i - b).rem_euclid(n)
                } else {
                    (i - b).clamp(0, n - 1)
                }
            })
            .collect();
        cur = layout::gather(&cur, &idx, &[len as usize], axis as i64)?;
    }
    Ok(cur)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::kernels::ChannelsLast;
    use ndarray::{ArrayD, IxDyn};

    fn nhwc() -> Tensor {
        Tensor::F32(ArrayD::from_shape_fn(IxDyn(&[1, 3, 4, 2]), |i| {
            (i[1] * 100 + i[2] * 10 + i[3]) as f32
        }))
    }

    #[test]
    fn a_transpose_that_moves_nothing_hands_its_operand_on_and_any_other_permutes() {
        let to_nchw = Transpose {
            perm: Some(vec![0, 3, 1, 2]),
        };
        let x = nhwc();
        let want = to_nchw.run(&[&x]).unwrap();
        // plain: a real permutation, as run() computes it
        assert!(to_nchw.run_owned(x.clone(), &[]).unwrap()[0].bit_eq(&want[0]));
        // its result held channels last is the NHWC operand itself: no copy
        let back = ChannelsLast {
            input: false,
            output: true,
        };
        let lent = to_nchw.run_channels_last(&[&x], None, back).unwrap();
        let at = x.as_f32().unwrap().as_ptr();
        let owned = to_nchw.run_owned_channels_last(x.clone(), &[], back).unwrap();
        assert!(owned[0].bit_eq(&lent[0]) && lent[0].bit_eq(&x));
        let moved = to_nchw.run_owned_channels_last(x, &[], back).unwrap();
        assert_eq!(moved[0].as_f32().unwrap().as_ptr(), at, "the same buffer, not a copy");
        // an identity perm hands the buffer on; other layouts still permute
        let same = Transpose {
            perm: Some(vec![0, 1, 2, 3]),
        };
        let y = nhwc();
        let at = y.as_f32().unwrap().as_ptr();
        assert_eq!(same.run_owned(y, &[]).unwrap()[0].as_f32().unwrap().as_ptr(), at);
        let both = ChannelsLast {
            input: true,
            output: true,
        };
        let x = nhwc();
        let want = to_nchw.run_channels_last(&[&x], None, both).unwrap();
        assert!(to_nchw.run_owned_channels_last(x, &[], both).unwrap()[0].bit_eq(&want[0]));
    }
}
