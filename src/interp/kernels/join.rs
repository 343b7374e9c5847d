//! Joins and splits along an axis, generic over the element type: concat, pack (stack),
//! unpack and split.

use super::{norm_axis, KernelResult};
use crate::map_tensor;
use crate::tensor::Tensor;
use ndarray::{ArrayD, Axis, IxDyn, Slice};

/// Collects the arrays of tensors that share the first one's type.
macro_rules! same_type {
    ($ts:expr, $v:ident) => {{
        let mut out = Vec::with_capacity($ts.len());
        for t in $ts.iter() {
            match t {
                Tensor::$v(a) => out.push(a.view()),
                other => return Err(format!("operands of different types ({})", other.dtype())),
            }
        }
        out
    }};
}

macro_rules! over_types {
    ($ts:expr, $views:ident => $body:expr) => {
        over_types!(@each $ts, $views => $body; F32 F64 F16 BF16 I1 I8 U8 I16 U16 I32 U32 I64 U64)
    };
    (@each $ts:expr, $views:ident => $body:expr; $($v:ident)*) => {
        match $ts.first().ok_or("no operands")? {
            $(Tensor::$v(_) => {
                let $views = same_type!($ts, $v);
                Tensor::$v($body)
            })*
        }
    };
}

pub fn concat(ts: &[&Tensor], axis: i64) -> KernelResult<Tensor> {
    let r = ts.first().ok_or("concat of nothing")?.shape().len();
    let a = norm_axis(axis, r)?;
    Ok(over_types!(ts, v => concat_axis(&v, a).map_err(|e| format!("concat: {e}"))?))
}

/// `parts` joined along `axis`: each part's blocks (its slice of the axis and the axes after
/// it, for each index of the axes before it) written to their place in the output, part by
/// part, so that each part is read in order. A part whose block is one value (basic_pitch's
/// `[N, 172, 309, 8]` is eight `[N, 172, 309, 1]` joined on the last axis: 425,000 blocks)
/// is a strided scatter, not a copy call per value. The shapes must agree off `axis`.
pub fn concat_axis<T: Clone>(parts: &[ndarray::ArrayViewD<T>], axis: usize) -> Result<ArrayD<T>, String> {
    let first = parts.first().ok_or("nothing to join")?;
    let shape = first.shape();
    if axis >= shape.len() {
        return Err(format!("axis {axis} of a rank-{} value", shape.len()));
    }
    let mut dims = shape.to_vec();
    dims[axis] = 0;
    for p in parts {
        let s = p.shape();
        if s.len() != shape.len() || (0..s.len()).any(|i| i != axis && s[i] != shape[i]) {
            return Err(format!("shapes {shape:?} and {s:?} differ off axis {axis}"));
        }
        dims[axis] += s[axis];
    }
    let inner: usize = shape[axis + 1..].iter().product();
    // one output row per index of the axes before `axis`: every part's block, in order
    let row = dims[axis] * inner;
    let Some(fill) = parts.iter().find_map(|p| p.iter().next().cloned()) else {
        return ArrayD::from_shape_vec(IxDyn(&dims), Vec::new()).map_err(|e| e.to_string());
    };
    let mut out: Vec<T> = vec![fill; dims.iter().product()];
    let mut offset = 0;
    for p in parts {
        let block = p.shape()[axis] * inner;
        if block == 0 {
            continue;
        }
        let p = p.as_standard_layout();
        let xs = p.as_slice().ok_or("layout")?;
        if block == 1 {
            for (d, x) in out[offset..].iter_mut().step_by(row).zip(xs) {
                *d = x.clone();
            }
        } else {
            for (d, x) in out.chunks_mut(row).zip(xs.chunks(block)) {
                d[offset..offset + block].clone_from_slice(x);
            }
        }
        offset += block;
    }
    ArrayD::from_shape_vec(IxDyn(&dims), out).map_err(|e| e.to_string())
}

pub fn pack(ts: &[&Tensor], axis: i64) -> KernelResult<Tensor> {
    let r = ts.first().ok_or("pack of nothing")?.shape().len();
    let a = norm_axis(axis, r + 1)?;
    Ok(over_types!(ts, v => ndarray::stack(Axis(a), &v).map_err(|e| format!("pack: {e}"))?))
}

pub fn unpack(t: &Tensor, axis: i64) -> KernelResult<Vec<Tensor>> {
    let a = norm_axis(axis, t.shape().len())?;
    let n = t.shape()[a];
    Ok((0..n)
        .map(|i| map_tensor!(t, x => x.index_axis(Axis(a), i).to_owned()))
        .collect())
}

/// Splits along `axis` into pieces of `sizes` (one −1 takes the rest).
pub fn split(t: &Tensor, axis: i64, sizes: &[i64]) -> KernelResult<Vec<Tensor>> {
    let a = norm_axis(axis, t.shape().len())?;
    let d = t.shape()[a] as i64;
    let known: i64 = sizes.iter().filter(|&&s| s >= 0).sum();
    let mut sizes = sizes.to_vec();
    if let Some(s) = sizes.iter_mut().find(|s| **s < 0) {
        *s = d - known;
    }
    if sizes.iter().any(|&s| s < 0) || sizes.iter().sum::<i64>() != d {
        return Err(format!("split sizes {sizes:?} do not add up to {d}"));
    }
    let mut start = 0isize;
    let mut out = Vec::new();
    for s in sizes {
        let sl = Slice::new(start, Some(start + s as isize), 1);
        out.push(map_tensor!(t, x => x.slice_axis(Axis(a), sl).to_owned()));
        start += s as isize;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_agree_with_ndarray_concatenate_on_every_axis() {
        let a = ndarray::Array::from_shape_fn((2, 3, 4), |(i, j, k)| (i * 100 + j * 10 + k) as i32).into_dyn();
        for axis in 0..3 {
            let mut shape = vec![2, 3, 4];
            shape[axis] = 1;
            let b = ArrayD::from_elem(IxDyn(&shape), -1);
            let c = a.clone().reversed_axes().reversed_axes();
            let parts = [a.view(), b.view(), c.view()];
            assert_eq!(
                concat_axis(&parts, axis).unwrap(),
                ndarray::concatenate(Axis(axis), &parts).unwrap(),
                "axis {axis}"
            );
        }
        // a transposed part, and parts that do not fit
        let t = a.clone().permuted_axes(vec![0, 2, 1]).as_standard_layout().into_owned();
        let tv = a.view().permuted_axes(vec![0, 2, 1]);
        assert_eq!(
            concat_axis(&[tv.clone(), tv.clone()], 2).unwrap(),
            ndarray::concatenate(Axis(2), &[t.view(), t.view()]).unwrap()
        );
        assert!(concat_axis(&[a.view(), tv], 0).is_err());
        assert!(concat_axis(&[a.view()], 3).is_err());
        // one value per block in every part (an interleave), and parts empty along the axis
        let ones: Vec<ArrayD<i32>> = (0..8)
            .map(|p| a.slice(ndarray::s![.., .., p % 4..p % 4 + 1]).to_owned().into_dyn())
            .collect();
        let views: Vec<_> = ones.iter().map(|o| o.view()).collect();
        assert_eq!(
            concat_axis(&views, 2).unwrap(),
            ndarray::concatenate(Axis(2), &views).unwrap()
        );
        let none = ArrayD::<i32>::zeros(IxDyn(&[2, 0, 4]));
        let parts = [none.view(), a.view(), none.view()];
        assert_eq!(concat_axis(&parts, 1).unwrap(), a);
        assert_eq!(concat_axis(&[none.view(), none.view()], 1).unwrap().shape(), &[2, 0, 4]);
    }
}
