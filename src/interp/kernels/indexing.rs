//! Kernels that pick or place elements by index: TopK (the k largest or smallest along an
//! axis, with their indices) and OneHot.

use super::{from_vec, ints_of, norm_axis, KernelResult};
use crate::tensor::Tensor;
use ndarray::ArrayD;

/// ONNX TopK: the `k` largest (or smallest) values along `axis` and their indices. Equal
/// values keep index order (the lower index first), as ONNX specifies; NaN counts as larger
/// than every number. The values come out sorted either way (ONNX's `sorted = 0` leaves the
/// order to the runtime). Elements are ordered as f64 (exact for all but 64-bit integers
/// beyond 2⁵³) and the values then read from `x` itself, in its own type.
pub fn top_k(x: &Tensor, k: i64, axis: i64, largest: bool) -> KernelResult<(Tensor, Tensor)> {
    let Tensor::F64(a) = super::layout::cast(x, crate::tensor::DType::F64)? else {
        return Err(format!("TopK of {}", x.dtype()));
    };
    let ax = norm_axis(axis, a.ndim())?;
    let n = a.shape()[ax];
    if k < 0 || k as usize > n {
        return Err(format!("TopK k = {k} for an axis of {n} elements"));
    }
    let k = k as usize;
    let mut shape = a.shape().to_vec();
    shape[ax] = k;
    let a = a.as_standard_layout();
    let flat = a.as_slice().ok_or("TopK input layout")?;
    let inner: usize = a.shape()[ax + 1..].iter().product();
    let outer: usize = a.shape()[..ax].iter().product();
    let mut idxs = vec![0i64; outer * k * inner];
    let mut order: Vec<usize> = Vec::with_capacity(n);
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| flat[(o * n + j) * inner + i];
            order.clear();
            order.extend(0..n);
            // a stable sort keeps equal values in index order
            order.sort_by(|&p, &q| {
                let (u, v) = (at(p), at(q));
                let c = u.total_cmp(&v);
                let c = match (u.is_nan(), v.is_nan()) {
                    (true, false) => std::cmp::Ordering::Greater,
                    (false, true) => std::cmp::Ordering::Less,
                    _ if u == v => std::cmp::Ordering::Equal,
                    _ => c,
                };
                if largest {
                    c.reverse()
                } else {
                    c
                }
            });
            for (r, &j) in order[..k].iter().enumerate() {
                idxs[(o * k + r) * inner + i] = j as i64;
            }
        }
    }
    let idxs = Tensor::I64(from_vec(&shape, idxs)?);
    Ok((gather_elements(x, &idxs, axis)?, idxs))
}

/// ONNX OneHot: `indices` (negative counts from `depth`) expanded along a new `axis` of
/// `depth` elements, `values[1]` at the index and `values[0]` elsewhere; an index out of
/// range gives a row of `values[0]`.
pub fn one_hot(indices: &Tensor, depth: &Tensor, values: &Tensor, axis: i64) -> KernelResult<Tensor> {
    let idx: Vec<i64> = match indices {
        Tensor::F32(a) => a.iter().map(|&v| v as i64).collect(),
        Tensor::F64(a) => a.iter().map(|&v| v as i64).collect(),
        t => ints_of(t).ok_or_else(|| format!("OneHot indices of {}", t.dtype()))?,
    };
    let depth = match depth {
        Tensor::F32(a) if a.len() == 1 => a.iter().next().copied().unwrap_or(0.0) as i64,
        Tensor::F64(a) if a.len() == 1 => a.iter().next().copied().unwrap_or(0.0) as i64,
        t => match ints_of(t).as_deref() {
            Some([d]) => *d,
            _ => return Err("OneHot depth must be one number".into()),
        },
    };
    if depth <= 0 {
        return Err(format!("OneHot depth = {depth}"));
    }
    let rank = indices.shape().len() + 1;
    let ax = norm_axis(axis, rank)?;
    let mut shape = indices.shape().to_vec();
    shape.insert(ax, depth as usize);
    let inner: usize = indices.shape()[ax..].iter().product();
    let d = depth as usize;
    // out[o, j, i] = on when idx[o, i] == j
    let place = |hot: &mut dyn FnMut(usize)| {
        for (p, &v) in idx.iter().enumerate() {
            let v = if v < 0 { v + depth } else { v };
            if (0..depth).contains(&v) {
                let (o, i) = (p / inner.max(1), p % inner.max(1));
                hot((o * d + v as usize) * inner + i);
            }
        }
    };
    macro_rules! fill {
        ($a:expr, $variant:ident) => {{
            let v: Vec<_> = $a.iter().copied().collect();
            let [off, on] = v[..] else {
                return Err(format!("OneHot values must hold 2 elements, got {}", v.len()));
            };
            let mut out = vec![off; shape.iter().product()];
            place(&mut |k| out[k] = on);
            Tensor::$variant(ArrayD::from_shape_vec(shape.clone(), out).map_err(|e| e.to_string())?)
        }};
    }
    Ok(match values {
        Tensor::F32(a) => fill!(a, F32),
        Tensor::F64(a) => fill!(a, F64),
        Tensor::I64(a) => fill!(a, I64),
        Tensor::I32(a) => fill!(a, I32),
        Tensor::I8(a) => fill!(a, I8),
        Tensor::U8(a) => fill!(a, U8),
        Tensor::I1(a) => fill!(a, I1),
        t => return Err(format!("OneHot values of {}", t.dtype())),
    })
}

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut st = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        st[d] = st[d + 1] * shape[d + 1];
    }
    st
}

/// ONNX GatherElements: `out[i…] = data[i… with i_axis replaced by indices[i…]]`, negative
/// indices counted from the end; any data type.
pub fn gather_elements(data: &Tensor, indices: &Tensor, axis: i64) -> KernelResult<Tensor> {
    let idx = ints_of(indices).ok_or_else(|| format!("GatherElements indices of {}", indices.dtype()))?;
    let (dshape, ishape) = (data.shape().to_vec(), indices.shape().to_vec());
    if dshape.len() != ishape.len() {
        return Err(format!(
            "GatherElements of rank {} data with rank {} indices",
            dshape.len(),
            ishape.len()
        ));
    }
    let ax = norm_axis(axis, dshape.len())?;
    let (ds, is) = (strides(&dshape), strides(&ishape));
    let n = dshape[ax] as i64;
    let mut src = Vec::with_capacity(idx.len());
    for (p, &v) in idx.iter().enumerate() {
        let v = if v < 0 { v + n } else { v };
        if !(0..n).contains(&v) {
            return Err(format!("GatherElements index {v} out of range for an axis of {n}"));
        }
        let mut off = 0;
        for d in 0..ishape.len() {
            let i = (p / is[d]) % ishape[d];
            off += if d == ax { v as usize } else { i } * ds[d];
        }
        src.push(off);
    }
    Ok(crate::map_tensor!(data, a => {
        let a = a.as_standard_layout();
        let flat = a.as_slice().unwrap_or_default();
        // the lengths match by construction: the default (empty) array is never produced
        ArrayD::from_shape_vec(ishape.clone(), src.iter().map(|&i| flat[i].clone()).collect()).unwrap_or_default()
    }))
}

/// ONNX Trilu: the upper (or lower) triangle of the last two dims from diagonal `k`, zeros
/// elsewhere; any data type.
pub fn trilu(x: &Tensor, k: i64, upper: bool) -> KernelResult<Tensor> {
    let shape = x.shape().to_vec();
    if shape.len() < 2 {
        return Err(format!("Trilu of rank {}", shape.len()));
    }
    let (rows, cols) = (shape[shape.len() - 2], shape[shape.len() - 1]);
    let keep = |p: usize| {
        let (r, c) = (((p / cols) % rows.max(1)) as i64, (p % cols.max(1)) as i64);
        if upper {
            c - r >= k
        } else {
            c - r <= k
        }
    };
    Ok(crate::map_tensor!(x, a => {
        let a = a.as_standard_layout();
        let v = a.iter().enumerate().map(|(p, e)| if keep(p) { e.clone() } else { Default::default() }).collect();
        ArrayD::from_shape_vec(shape.clone(), v).unwrap_or_default()
    }))
}

/// ONNX Hardmax: 1 at the first maximum of each slice along `axis`, 0 elsewhere.
pub fn hardmax(x: &Tensor, axis: i64) -> KernelResult<Tensor> {
    let Tensor::F32(a) = x else {
        return Err(format!("Hardmax of {} is not supported", x.dtype()));
    };
    let ax = norm_axis(axis, a.ndim())?;
    let mut out = ArrayD::<f32>::zeros(a.raw_dim());
    for (lane, mut o) in a
        .lanes(ndarray::Axis(ax))
        .into_iter()
        .zip(out.lanes_mut(ndarray::Axis(ax)))
    {
        let best = lane
            .iter()
            .enumerate()
            .fold(None, |b: Option<(usize, f32)>, (i, &v)| match b {
                Some((_, bv)) if bv >= v => b,
                _ => Some((i, v)),
            });
        if let Some((i, _)) = best {
            o[i] = 1.0;
        }
    }
    Ok(Tensor::F32(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::F32(ArrayD::from_shape_vec(shape.to_vec(), v.to_vec()).unwrap())
    }

    #[test]
    fn top_k_keeps_index_order_among_equal_values() {
        let x = f32s(&[2, 4], &[1.0, 3.0, 3.0, 2.0, 5.0, 4.0, 6.0, 4.0]);
        let (v, i) = top_k(&x, 2, 1, true).unwrap();
        assert_eq!(v, f32s(&[2, 2], &[3.0, 3.0, 6.0, 5.0]));
        assert_eq!(ints_of(&i).unwrap(), [1, 2, 2, 0]);
        let (v, i) = top_k(&x, 1, 0, false).unwrap();
        assert_eq!(v, f32s(&[1, 4], &[1.0, 3.0, 3.0, 2.0]));
        assert_eq!(ints_of(&i).unwrap(), [0, 0, 0, 0]);
    }

    #[test]
    fn gather_elements_and_trilu_match_onnxs_examples() {
        // onnx.backend.test.case.node.gatherelements: axis 1
        let data = f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let idx = Tensor::I64(ArrayD::from_shape_vec(vec![2, 2], vec![0, 0, 1, 0]).unwrap());
        assert_eq!(
            gather_elements(&data, &idx, 1).unwrap(),
            f32s(&[2, 2], &[1.0, 1.0, 4.0, 3.0])
        );
        // axis 0 with a negative index
        let data = f32s(&[3, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
        let idx = Tensor::I64(ArrayD::from_shape_vec(vec![2, 3], vec![-1, -2, 0, -2, 0, 0]).unwrap());
        assert_eq!(
            gather_elements(&data, &idx, 0).unwrap(),
            f32s(&[2, 3], &[7.0, 5.0, 3.0, 4.0, 2.0, 3.0])
        );
        let x = f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(
            trilu(&x, 0, true).unwrap(),
            f32s(&[2, 3], &[1.0, 2.0, 3.0, 0.0, 5.0, 6.0])
        );
        assert_eq!(
            trilu(&x, -1, false).unwrap(),
            f32s(&[2, 3], &[0.0, 0.0, 0.0, 4.0, 0.0, 0.0])
        );
    }

    #[test]
    fn one_hot_places_on_values_along_the_new_axis() {
        let idx = Tensor::I64(ArrayD::from_shape_vec(vec![3], vec![0, -1, 5]).unwrap());
        let depth = Tensor::I64(ndarray::arr0(3).into_dyn());
        let values = f32s(&[2], &[0.0, 1.0]);
        // axis -1: [3, 3]; index -1 is 2; 5 is out of range
        let y = one_hot(&idx, &depth, &values, -1).unwrap();
        assert_eq!(y, f32s(&[3, 3], &[1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]));
        // axis 0: [3 (depth), 3]
        let y = one_hot(&idx, &depth, &values, 0).unwrap();
        assert_eq!(y, f32s(&[3, 3], &[1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]));
    }
}
