//! Kernels that read or write whole index tuples: GatherND, ScatterND and ScatterElements.
//!
//! Each works out flat (destination, source) element offsets first, then moves the elements
//! of whatever type the tensor holds; the reductions (add, mul, max, min) combine in f64,
//! exact for every type but 64-bit integers beyond 2⁵³.

use super::layout::cast;
use super::{from_vec, ints_of, norm_axis, strides_of, KernelResult};
use crate::tensor::{DType, Tensor};

/// How a scatter combines an update with the value already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

impl Reduction {
    pub fn parse(s: &str) -> KernelResult<Reduction> {
        Ok(match s {
            "none" => Reduction::None,
            "add" => Reduction::Add,
            "mul" => Reduction::Mul,
            "max" => Reduction::Max,
            "min" => Reduction::Min,
            other => return Err(format!("reduction = \"{other}\" is not supported")),
        })
    }

    fn apply(self, a: f64, b: f64) -> f64 {
        match self {
            Reduction::None => b,
            Reduction::Add => a + b,
            Reduction::Mul => a * b,
            Reduction::Max => a.max(b),
            Reduction::Min => a.min(b),
        }
    }
}

/// The elements of `t` at flat offsets `idx`, as a tensor of `shape`.
fn take(t: &Tensor, idx: &[usize], shape: &[usize]) -> KernelResult<Tensor> {
    let t = t.clone();
    Ok(crate::map_tensor!(t, a => {
        let a = a.as_standard_layout();
        let flat = a.as_slice().ok_or("layout")?;
        from_vec(shape, idx.iter().map(|&i| flat[i].clone()).collect())?
    }))
}

/// `data` with each (destination, source) pair's element of `updates` written (or combined)
/// into it, in order (later pairs win for `none`).
fn place(data: &Tensor, updates: &Tensor, pairs: &[(usize, usize)], r: Reduction) -> KernelResult<Tensor> {
    if data.dtype() != updates.dtype() {
        return Err(format!("updates are {}, the data {}", updates.dtype(), data.dtype()));
    }
    if r != Reduction::None {
        let (Tensor::F64(d), Tensor::F64(u)) = (cast(data, DType::F64)?, cast(updates, DType::F64)?) else {
            return Err("scatter".into());
        };
        let mut out: Vec<f64> = d.iter().copied().collect();
        let u: Vec<f64> = u.iter().copied().collect();
        for &(dst, src) in pairs {
            out[dst] = r.apply(out[dst], u[src]);
        }
        return cast(&Tensor::F64(from_vec(data.shape(), out)?), data.dtype());
    }
    macro_rules! each {
        ($($v:ident)*) => {
            match (data, updates) {
                $((Tensor::$v(d), Tensor::$v(u)) => {
                    let mut out: Vec<_> = d.iter().cloned().collect();
                    let u: Vec<_> = u.iter().cloned().collect();
                    for &(dst, src) in pairs {
                        out[dst] = u[src].clone();
                    }
                    Tensor::$v(from_vec(d.shape(), out)?)
                })*
                _ => unreachable!("same dtype checked above"),
            }
        };
    }
    Ok(each!(F32 F64 F16 BF16 I1 I8 U8 I16 U16 I32 U32 I64 U64))
}

fn indices(t: &Tensor) -> KernelResult<Vec<i64>> {
    ints_of(t).ok_or_else(|| format!("indices are {}, expected integers", t.dtype()))
}

/// An index into a dim of `n`, negative ones counting from the end.
fn wrap(i: i64, n: usize, what: &str) -> KernelResult<usize> {
    let j = if i < 0 { i + n as i64 } else { i };
    if j < 0 || j >= n as i64 {
        return Err(format!("{what} index {i} is out of range for a dim of {n}"));
    }
    Ok(j as usize)
}

/// The flat offset, in `data`, of the slice an index tuple at `t` (its last dim) addresses,
/// after `batch` leading batch dims at batch offset `b`.
fn tuple_offset(data: &[usize], st: &[usize], batch: usize, b: usize, tuple: &[i64]) -> KernelResult<usize> {
    let mut at = b;
    for (j, &i) in tuple.iter().enumerate() {
        at += wrap(i, data[batch + j], "GatherND/ScatterND")? * st[batch + j];
    }
    Ok(at)
}

/// GatherND: slices of `data` addressed by the index tuples in the last dim of `idx`, after
/// `batch_dims` leading dims both share.
pub fn gather_nd(data: &Tensor, idx: &Tensor, batch_dims: usize) -> KernelResult<Tensor> {
    let (ds, is) = (data.shape(), idx.shape());
    let k = *is.last().ok_or("GatherND indices must have a rank of at least 1")?;
    if batch_dims >= is.len() || batch_dims + k > ds.len() || ds[..batch_dims] != is[..batch_dims] {
        return Err(format!(
            "GatherND of {ds:?} by indices {is:?} with batch_dims = {batch_dims}"
        ));
    }
    let iv = indices(idx)?;
    let st = strides_of(ds);
    let slice: usize = ds[batch_dims + k..].iter().product();
    let batch: usize = ds[..batch_dims].iter().product();
    let per_batch = iv.len() / k.max(1) / batch.max(1);
    let mut src = Vec::new();
    for (t, tuple) in iv.chunks(k.max(1)).enumerate() {
        let b = if batch_dims == 0 {
            0
        } else {
            (t / per_batch.max(1)) * st[batch_dims - 1]
        };
        let at = if k == 0 {
            b
        } else {
            tuple_offset(ds, &st, batch_dims, b, tuple)?
        };
        src.extend(at..at + slice);
    }
    let shape = [&is[..is.len() - 1], &ds[batch_dims + k..]].concat();
    take(data, &src, &shape)
}

/// ScatterND: `data` with the slices addressed by the index tuples of `idx` set from (or
/// combined with) `updates`.
pub fn scatter_nd(data: &Tensor, idx: &Tensor, updates: &Tensor, r: Reduction) -> KernelResult<Tensor> {
    let (ds, is) = (data.shape(), idx.shape());
    let k = *is.last().ok_or("ScatterND indices must have a rank of at least 1")?;
    let want = [&is[..is.len() - 1], &ds[k.min(ds.len())..]].concat();
    if k > ds.len() || updates.shape() != want {
        return Err(format!(
            "ScatterND into {ds:?} at indices {is:?} needs updates of {want:?}, got {:?}",
            updates.shape()
        ));
    }
    let st = strides_of(ds);
    let slice: usize = ds[k..].iter().product();
    let mut pairs = Vec::new();
    for (t, tuple) in indices(idx)?.chunks(k.max(1)).enumerate() {
        let at = if k == 0 { 0 } else { tuple_offset(ds, &st, 0, 0, tuple)? };
        pairs.extend((0..slice).map(|e| (at + e, t * slice + e)));
    }
    place(data, updates, &pairs, r)
}

/// ScatterElements: element `p` of `updates` goes to `p` with its `axis` coordinate replaced
/// by `idx[p]`.
pub fn scatter_elements(
    data: &Tensor,
    idx: &Tensor,
    updates: &Tensor,
    axis: i64,
    r: Reduction,
) -> KernelResult<Tensor> {
    let ds = data.shape();
    let ax = norm_axis(axis, ds.len())?;
    let is = idx.shape();
    if is != updates.shape() || is.len() != ds.len() {
        return Err(format!(
            "ScatterElements into {ds:?}: indices {is:?} and updates {:?} must have one shape of the data's rank",
            updates.shape()
        ));
    }
    let (dst_st, idx_st) = (strides_of(ds), strides_of(is));
    let mut pairs = Vec::with_capacity(idx.len());
    for (p, &i) in indices(idx)?.iter().enumerate() {
        let mut dst = 0;
        for d in 0..ds.len() {
            let c = (p / idx_st[d]) % is[d];
            let c = if d == ax {
                wrap(i, ds[ax], "ScatterElements")?
            } else {
                c
            };
            if c >= ds[d] {
                return Err(format!("ScatterElements indices {is:?} exceed the data's {ds:?}"));
            }
            dst += c * dst_st[d];
        }
        pairs.push((dst, p));
    }
    place(data, updates, &pairs, r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{arr1, arr2};

    #[test]
    fn gather_nd_reads_tuples_and_scatter_nd_writes_them_back() {
        let data = Tensor::I32(arr2(&[[0, 1], [2, 3]]).into_dyn());
        let idx = Tensor::I64(arr2(&[[1, 0], [0, 1]]).into_dyn());
        assert_eq!(
            gather_nd(&data, &idx, 0).unwrap(),
            Tensor::I32(arr1(&[2, 1]).into_dyn())
        );
        let upd = Tensor::I32(arr1(&[20, 10]).into_dyn());
        let out = scatter_nd(&data, &idx, &upd, Reduction::Add).unwrap();
        assert_eq!(out, Tensor::I32(arr2(&[[0, 11], [22, 3]]).into_dyn()));
    }

    #[test]
    fn scatter_elements_replaces_the_axis_coordinate() {
        let data = Tensor::F32(arr2(&[[1.0, 2.0, 3.0, 4.0, 5.0]]).into_dyn());
        let idx = Tensor::I64(arr2(&[[1, 3]]).into_dyn());
        let upd = Tensor::F32(arr2(&[[1.1, 2.1]]).into_dyn());
        let out = scatter_elements(&data, &idx, &upd, 1, Reduction::None).unwrap();
        assert_eq!(out, Tensor::F32(arr2(&[[1.0, 1.1, 3.0, 2.1, 5.0]]).into_dyn()));
    }
}
