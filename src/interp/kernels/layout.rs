//! Layout ops, generic over the element type: reshape, transpose, slice/strided slice, pad/mirror pad, tile, gather, squeeze/expand, fill, shape, cast.

use super::{from_vec, norm_axis, KernelResult};
use crate::map_tensor;
use crate::tensor::{DType, Tensor};
use half::{bf16, f16};
use ndarray::{ArrayD, Axis, IxDyn, Slice};

/// Reshape with one −1 inferred (and, when `zero_copies`, ONNX's 0 = keep that dim).
pub fn reshape(t: &Tensor, shape: &[i64], zero_copies: bool) -> KernelResult<Tensor> {
    let n = t.len();
    let mut dims: Vec<usize> = Vec::with_capacity(shape.len());
    let mut infer = None;
    for (i, &d) in shape.iter().enumerate() {
        match d {
            -1 if infer.is_none() => {
                infer = Some(i);
                dims.push(1);
            }
            0 if zero_copies => dims.push(*t.shape().get(i).ok_or("0 in a reshape beyond the input rank")?),
            d if d >= 0 => dims.push(d as usize),
            _ => return Err(format!("invalid target shape {shape:?}")),
        }
    }
    let known: usize = dims.iter().product();
    if let Some(i) = infer {
        if known == 0 || n % known != 0 {
            return Err(format!("cannot reshape {} elements to {shape:?}", n));
        }
        dims[i] = n / known;
    }
    if dims.iter().product::<usize>() != n {
        return Err(format!("cannot reshape {:?} ({n} elements) to {shape:?}", t.shape()));
    }
    Ok(map_tensor!(t, a => {
        let a = a.as_standard_layout().into_owned();
        a.into_shape_with_order(IxDyn(&dims)).map_err(|e| e.to_string())?
    }))
}

pub fn transpose(t: &Tensor, perm: &[i64]) -> KernelResult<Tensor> {
    let r = t.shape().len();
    let p: Vec<usize> = perm.iter().map(|&a| norm_axis(a, r)).collect::<Result<_, _>>()?;
    let mut seen = vec![false; r];
    if p.len() != r || p.iter().any(|&a| std::mem::replace(&mut seen[a], true)) {
        return Err(format!("{perm:?} is not a permutation of rank {r}"));
    }
    Ok(map_tensor!(t, a => super::permute::permute(a.view(), &p)))
}

/// Slices every axis with `(start, end, step)`; then reshapes to `shape` (new or shrunk axes).
fn slice_axes(t: &Tensor, ranges: &[(isize, isize, isize)], shape: &[usize]) -> KernelResult<Tensor> {
    Ok(map_tensor!(t, x => {
        let v = x.slice_each_axis(|ax| {
            let (b, e, s) = ranges[ax.axis.index()];
            if s > 0 { Slice::new(b, Some(e.max(b)), s) } else { Slice::new((e + 1).min(b + 1), Some(b + 1), s) }
        });
        // the innermost axis longer than 1: the value in C order is its lanes one after
        // another (axes after it have length 1)
        let lane_axis = (0..v.ndim()).rev().find(|&a| v.shape()[a] > 1);
        let owned = match lane_axis {
            Some(k) if !v.is_standard_layout() => {
                // lane by lane, each a strided run, not element by element over every axis
                // (basic_pitch's frames: [1, C, 43844] sliced by 2 along time)
                let mut out = Vec::with_capacity(v.len());
                for lane in v.lanes(ndarray::Axis(k)) {
                    match lane.as_slice() {
                        Some(r) => out.extend_from_slice(r),
                        None => out.extend(lane.iter().cloned()),
                    }
                }
                ndarray::ArrayD::from_shape_vec(v.raw_dim(), out).map_err(|e| e.to_string())?
            }
            _ => v.as_standard_layout().into_owned(),
        };
        owned.into_shape_with_order(IxDyn(shape)).map_err(|e| e.to_string())?
    }))
}

/// TF Slice: `size` −1 means to the end.
pub fn slice(t: &Tensor, begin: &[i64], size: &[i64]) -> KernelResult<Tensor> {
    let sh = t.shape();
    if begin.len() != sh.len() || size.len() != sh.len() {
        return Err(format!(
            "Slice begin {begin:?} / size {size:?} do not match rank {}",
            sh.len()
        ));
    }
    let mut ranges = Vec::new();
    let mut out = Vec::new();
    for i in 0..sh.len() {
        let d = sh[i] as i64;
        let b = begin[i];
        let e = if size[i] < 0 { d } else { b + size[i] };
        if b < 0 || e > d || b > e {
            return Err(format!("Slice [{b}, {e}) is outside dim {i} of size {d}"));
        }
        ranges.push((b as isize, e as isize, 1));
        out.push((e - b) as usize);
    }
    slice_axes(t, &ranges, &out)
}

/// TF StridedSlice masks.
#[derive(Debug, Clone, Copy, Default)]
pub struct StridedMasks {
    pub begin: i64,
    pub end: i64,
    pub ellipsis: i64,
    pub new_axis: i64,
    pub shrink_axis: i64,
}

pub fn strided_slice(t: &Tensor, begin: &[i64], end: &[i64], strides: &[i64], m: StridedMasks) -> KernelResult<Tensor> {
    let sh = t.shape();
    let n = begin.len();
    if end.len() != n || strides.len() != n {
        return Err("StridedSlice begin, end and strides differ in length".into());
    }
    let bit = |mask: i64, i: usize| (mask >> i) & 1 == 1;
    let consuming = (0..n).filter(|&i| !bit(m.ellipsis, i) && !bit(m.new_axis, i)).count();
    let has_ellipsis = (0..n).any(|i| bit(m.ellipsis, i));
    let mut ranges = Vec::new();
    let mut out_shape = Vec::new();
    let mut dim = 0usize;
    let full = |d: usize| ((0isize, d as isize, 1isize), d);
    for i in 0..n {
        if bit(m.ellipsis, i) {
            let cover = sh
                .len()
                .checked_sub(consuming)
                .ok_or("StridedSlice has more indices than dims")?;
            for _ in 0..cover {
                let (r, len) = full(sh[dim]);
                ranges.push(r);
                out_shape.push(len);
                dim += 1;
            }
            continue;
        }
        if bit(m.new_axis, i) {
            out_shape.push(1);
            continue;
        }
        let d = *sh.get(dim).ok_or("StridedSlice has more indices than dims")? as i64;
        let s = strides[i];
        if s == 0 {
            return Err("StridedSlice stride 0".into());
        }
        let norm = |x: i64| if x < 0 { x + d } else { x };
        if bit(m.shrink_axis, i) {
            let b = norm(begin[i]);
            if b < 0 || b >= d {
                return Err(format!(
                    "StridedSlice index {} is out of range for dim of size {d}",
                    begin[i]
                ));
            }
            ranges.push((b as isize, (b + 1) as isize, 1));
            dim += 1;
            continue;
        }
        let (b, e) = if s > 0 {
            (
                if bit(m.begin, i) { 0 } else { norm(begin[i]).clamp(0, d) },
                if bit(m.end, i) { d } else { norm(end[i]).clamp(0, d) },
            )
        } else {
            (
                if bit(m.begin, i) {
                    d - 1
                } else {
                    norm(begin[i]).clamp(-1, d - 1)
                },
                if bit(m.end, i) {
                    -1
                } else {
                    norm(end[i]).clamp(-1, d - 1)
                },
            )
        };
        let len = if s > 0 {
            ((e - b).max(0) + s - 1) / s
        } else {
            ((b - e).max(0) + (-s) - 1) / (-s)
        };
        if len == 0 {
            ranges.push((0, 0, 1));
        } else if s > 0 {
            ranges.push((b as isize, e as isize, s as isize));
        } else {
            // elements b, b+s, ..., down to the last one above e
            let last = b + (len - 1) * s;
            ranges.push((b as isize, (last - 1) as isize, s as isize));
        }
        out_shape.push(len as usize);
        dim += 1;
    }
    if !has_ellipsis {
        while dim < sh.len() {
            let (r, len) = full(sh[dim]);
            ranges.push(r);
            out_shape.push(len);
            dim += 1;
        }
    }
    slice_axes(t, &ranges, &out_shape)
}

/// For each output position along one axis, the input position (mirror padding, tiling).
fn gather_axes(t: &Tensor, maps: &[Vec<usize>]) -> Tensor {
    let mut cur: Option<Tensor> = None;
    for (a, idx) in maps.iter().enumerate() {
        // an axis taken whole, in order, is left as it is (not copied once per axis)
        if idx.iter().copied().eq(0..t.shape()[a]) {
            continue;
        }
        let from = cur.as_ref().unwrap_or(t);
        cur = Some(map_tensor!(from, x => gather_axis(x, a, idx)));
    }
    cur.unwrap_or_else(|| t.clone())
}

/// `x` with its `axis` indexed by `idx` (every index < the axis length): the runs of the axes
/// after it copied whole, where ndarray's `select` appends lane by lane.
fn gather_axis<T: Clone>(x: &ArrayD<T>, axis: usize, idx: &[usize]) -> ArrayD<T> {
    let x = x.as_standard_layout();
    let shape = x.shape();
    let (outer, d, inner) = (
        shape[..axis].iter().product::<usize>(),
        shape[axis],
        shape[axis + 1..].iter().product::<usize>(),
    );
    let mut dims = shape.to_vec();
    dims[axis] = idx.len();
    let Some(xs) = x.as_slice() else {
        return x.select(Axis(axis), idx);
    };
    let mut out: Vec<T> = Vec::with_capacity(outer * idx.len() * inner);
    for o in 0..outer {
        let block = &xs[o * d * inner..(o + 1) * d * inner];
        if inner == 1 {
            out.extend(idx.iter().map(|&k| block[k].clone()));
        } else {
            for &k in idx {
                out.extend_from_slice(&block[k * inner..(k + 1) * inner]);
            }
        }
    }
    ArrayD::from_shape_vec(IxDyn(&dims), out).unwrap_or_else(|_| x.select(Axis(axis), idx))
}

/// Pads with a constant; `paddings` is [before, after] per dim.
pub fn pad(t: &Tensor, paddings: &[i64], value: f64) -> KernelResult<Tensor> {
    let sh = t.shape().to_vec();
    if paddings.len() != 2 * sh.len() || paddings.iter().any(|&p| p < 0) {
        return Err(format!(
            "paddings {paddings:?} do not fit rank {} (negative padding is not supported)",
            sh.len()
        ));
    }
    let out_shape: Vec<usize> = (0..sh.len())
        .map(|i| sh[i] + (paddings[2 * i] + paddings[2 * i + 1]) as usize)
        .collect();
    macro_rules! pad_as {
        ($x:expr, $fill:expr) => {{
            let mut out = ArrayD::from_elem(IxDyn(&out_shape), $fill);
            out.slice_each_axis_mut(|ax| {
                let b = paddings[2 * ax.axis.index()] as isize;
                Slice::new(b, Some(b + sh[ax.axis.index()] as isize), 1)
            })
            .assign($x);
            out
        }};
    }
    Ok(match t {
        Tensor::F32(x) => Tensor::F32(pad_as!(x, value as f32)),
        Tensor::F64(x) => Tensor::F64(pad_as!(x, value)),
        Tensor::F16(x) => Tensor::F16(pad_as!(x, f16::from_f64(value))),
        Tensor::BF16(x) => Tensor::BF16(pad_as!(x, bf16::from_f64(value))),
        Tensor::I1(x) => Tensor::I1(pad_as!(x, value != 0.0)),
        Tensor::I8(x) => Tensor::I8(pad_as!(x, value as i8)),
        Tensor::U8(x) => Tensor::U8(pad_as!(x, value as u8)),
        Tensor::I16(x) => Tensor::I16(pad_as!(x, value as i16)),
        Tensor::U16(x) => Tensor::U16(pad_as!(x, value as u16)),
        Tensor::I32(x) => Tensor::I32(pad_as!(x, value as i32)),
        Tensor::U32(x) => Tensor::U32(pad_as!(x, value as u32)),
        Tensor::I64(x) => Tensor::I64(pad_as!(x, value as i64)),
        Tensor::U64(x) => Tensor::U64(pad_as!(x, value as u64)),
    })
}

/// MirrorPad: REFLECT excludes the edge, SYMMETRIC repeats it.
pub fn mirror_pad(t: &Tensor, paddings: &[i64], symmetric: bool) -> KernelResult<Tensor> {
    let sh = t.shape().to_vec();
    if paddings.len() != 2 * sh.len() {
        return Err(format!("paddings {paddings:?} do not fit rank {}", sh.len()));
    }
    let mut maps = Vec::new();
    for (i, &d) in sh.iter().enumerate() {
        let (b, a) = (paddings[2 * i], paddings[2 * i + 1]);
        let limit = if symmetric { d as i64 } else { d as i64 - 1 };
        if b < 0 || a < 0 || b > limit || a > limit {
            return Err(format!("MirrorPad of {b}/{a} on a dim of size {d}"));
        }
        let d = d as i64;
        let map = (-b..d + a)
            .map(|j| {
                let k = if j < 0 {
                    if symmetric {
                        -j - 1
                    } else {
                        -j
                    }
                } else if j >= d {
                    if symmetric {
                        2 * d - j - 1
                    } else {
                        2 * d - j - 2
                    }
                } else {
                    j
                };
                k as usize
            })
            .collect();
        maps.push(map);
    }
    Ok(gather_axes(t, &maps))
}

pub fn tile(t: &Tensor, multiples: &[i64]) -> KernelResult<Tensor> {
    let sh = t.shape();
    if multiples.len() != sh.len() || multiples.iter().any(|&m| m < 0) {
        return Err(format!("multiples {multiples:?} do not fit rank {}", sh.len()));
    }
    let maps: Vec<Vec<usize>> = sh
        .iter()
        .zip(multiples)
        .map(|(&d, &m)| (0..d * m as usize).map(|j| j % d.max(1)).collect())
        .collect();
    Ok(gather_axes(t, &maps))
}

/// GatherV2 with batch_dims 0: out = params.shape[:axis] + indices.shape + params.shape[axis+1:].
pub fn gather(params: &Tensor, indices: &[i64], indices_shape: &[usize], axis: i64) -> KernelResult<Tensor> {
    let a = norm_axis(axis, params.shape().len())?;
    let d = params.shape()[a] as i64;
    let idx: Vec<usize> = indices
        .iter()
        .map(|&i| {
            let j = if i < 0 { i + d } else { i };
            if j < 0 || j >= d {
                Err(format!("gather index {i} is out of range for a dim of size {d}"))
            } else {
                Ok(j as usize)
            }
        })
        .collect::<Result<_, _>>()?;
    let mut shape: Vec<usize> = params.shape()[..a].to_vec();
    shape.extend_from_slice(indices_shape);
    shape.extend_from_slice(&params.shape()[a + 1..]);
    Ok(map_tensor!(params, x => {
        let g = x.select(Axis(a), &idx);
        g.as_standard_layout().into_owned().into_shape_with_order(IxDyn(&shape)).map_err(|e| e.to_string())?
    }))
}

/// Squeeze the given dims (all size-1 dims when empty).
pub fn squeeze(t: &Tensor, dims: &[i64]) -> KernelResult<Tensor> {
    let sh = t.shape();
    let drop: Vec<usize> = if dims.is_empty() {
        (0..sh.len()).filter(|&i| sh[i] == 1).collect()
    } else {
        dims.iter().map(|&d| norm_axis(d, sh.len())).collect::<Result<_, _>>()?
    };
    if let Some(&bad) = drop.iter().find(|&&i| sh[i] != 1) {
        return Err(format!("cannot squeeze dim {bad} of size {}", sh[bad]));
    }
    let shape: Vec<i64> = (0..sh.len())
        .filter(|i| !drop.contains(i))
        .map(|i| sh[i] as i64)
        .collect();
    reshape(t, &shape, false)
}

pub fn expand_dims(t: &Tensor, axis: i64) -> KernelResult<Tensor> {
    let sh = t.shape();
    let a = norm_axis(axis, sh.len() + 1)?;
    let mut shape: Vec<i64> = sh.iter().map(|&d| d as i64).collect();
    shape.insert(a, 1);
    reshape(t, &shape, false)
}

/// The shape of a tensor as i32 or i64.
pub fn shape_of(t: &Tensor, out: DType) -> KernelResult<Tensor> {
    let v: Vec<i64> = t.shape().iter().map(|&d| d as i64).collect();
    let n = v.len();
    Ok(match out {
        DType::I32 => Tensor::I32(from_vec(&[n], v.iter().map(|&d| d as i32).collect())?),
        DType::I64 => Tensor::I64(from_vec(&[n], v)?),
        other => return Err(format!("Shape as {other} is not supported")),
    })
}

/// Converts every element (floats to integers truncate toward zero and saturate; NaN → 0;
/// anything non-zero → true).
pub fn cast(t: &Tensor, to: DType) -> KernelResult<Tensor> {
    if t.dtype() == to {
        return Ok(t.clone());
    }
    let v: Vec<f64> = match t {
        Tensor::F32(a) => a.iter().map(|&x| x as f64).collect(),
        Tensor::F64(a) => a.iter().copied().collect(),
        Tensor::F16(a) => a.iter().map(|x| x.to_f64()).collect(),
        Tensor::BF16(a) => a.iter().map(|x| x.to_f64()).collect(),
        Tensor::I1(a) => a.iter().map(|&x| x as u8 as f64).collect(),
        Tensor::I8(a) => a.iter().map(|&x| x as f64).collect(),
        Tensor::U8(a) => a.iter().map(|&x| x as f64).collect(),
        Tensor::I16(a) => a.iter().map(|&x| x as f64).collect(),
        Tensor::U16(a) => a.iter().map(|&x| x as f64).collect(),
        Tensor::I32(a) => a.iter().map(|&x| x as f64).collect(),
        // 64-bit integers go between themselves (and to i32) without f64's 53-bit mantissa
        Tensor::U64(a) => match to {
            DType::I64 => return Ok(Tensor::I64(a.mapv(|x| x as i64))),
            DType::U32 => return Ok(Tensor::U32(a.mapv(|x| x as u32))),
            _ => a.iter().map(|&x| x as f64).collect(),
        },
        Tensor::U32(a) => a.iter().map(|&x| x as f64).collect(),
        Tensor::I64(a) => {
            if to == DType::U64 {
                return Ok(Tensor::U64(a.mapv(|x| x as u64)));
            }
            // i64 → i64-sized targets without passing through f64 precision loss
            if to == DType::I32 {
                return Ok(Tensor::I32(a.mapv(|x| x as i32)));
            }
            a.iter().map(|&x| x as f64).collect()
        }
    };
    let sh = t.shape();
    Ok(match to {
        DType::F32 => Tensor::F32(from_vec(sh, v.iter().map(|&x| x as f32).collect())?),
        DType::F64 => Tensor::F64(from_vec(sh, v)?),
        DType::F16 => Tensor::F16(from_vec(sh, v.iter().map(|&x| f16::from_f64(x)).collect())?),
        DType::BF16 => Tensor::BF16(from_vec(sh, v.iter().map(|&x| bf16::from_f64(x)).collect())?),
        DType::I1 => Tensor::I1(from_vec(sh, v.iter().map(|&x| x != 0.0).collect())?),
        DType::I8 => Tensor::I8(from_vec(sh, v.iter().map(|&x| x as i8).collect())?),
        DType::U8 => Tensor::U8(from_vec(sh, v.iter().map(|&x| x as u8).collect())?),
        DType::I16 => Tensor::I16(from_vec(sh, v.iter().map(|&x| x as i16).collect())?),
        DType::U16 => Tensor::U16(from_vec(sh, v.iter().map(|&x| x as u16).collect())?),
        DType::I32 => Tensor::I32(from_vec(sh, v.iter().map(|&x| x as i32).collect())?),
        DType::I64 => Tensor::I64(from_vec(sh, v.iter().map(|&x| x as i64).collect())?),
        DType::U32 => Tensor::U32(from_vec(sh, v.iter().map(|&x| x as u32).collect())?),
        DType::U64 => Tensor::U64(from_vec(sh, v.iter().map(|&x| x as u64).collect())?),
    })
}

/// A tensor of `dims` filled with the scalar `value`.
pub fn fill(dims: &[i64], value: &Tensor) -> KernelResult<Tensor> {
    if value.len() != 1 {
        return Err("Fill value must be a scalar".into());
    }
    let dims: Vec<usize> = dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("negative dim {d}")))
        .collect::<Result<_, _>>()?;
    Ok(map_tensor!(value, v => {
        let x = v.iter().next().cloned().ok_or("empty value")?;
        ArrayD::from_elem(IxDyn(&dims), x)
    }))
}

/// Broadcasts `t` to `shape` (bidirectionally, as ONNX Expand does; TF BroadcastTo is the
/// one-directional case).
pub fn broadcast_to(t: &Tensor, shape: &[i64]) -> KernelResult<Tensor> {
    let s: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
    let target = super::elementwise::broadcast_shape(t.shape(), &s)?;
    let ones = fill(
        &target.iter().map(|&d| d as i64).collect::<Vec<_>>(),
        &cast(&Tensor::F32(ndarray::arr0(0.0f32).into_dyn()), t.dtype())?,
    )?;
    super::elementwise::arith(super::elementwise::BinOp::Add, t, &ones)
}

/// ONNX DepthToSpace on NCHW: channel blocks become `b × b` pixel blocks (`DCR`: depth, column,
/// row order of the channels; `CRD`: column, row, depth).
pub fn depth_to_space(x: &Tensor, b: i64, crd: bool) -> KernelResult<Tensor> {
    let s = x.shape().to_vec();
    let [n, c, h, w] = s[..] else {
        return Err(format!("DepthToSpace of rank {}", s.len()));
    };
    let bu = b.max(1) as usize;
    if b < 1 || c % (bu * bu) != 0 {
        return Err(format!("DepthToSpace blocksize {b} for {c} channels"));
    }
    let (n, c, h, w, b) = (n as i64, c as i64, h as i64, w as i64, b);
    let out_c = c / (b * b);
    let (split, perm): (Vec<i64>, [i64; 6]) = if crd {
        (vec![n, out_c, b, b, h, w], [0, 1, 4, 2, 5, 3])
    } else {
        (vec![n, b, b, out_c, h, w], [0, 3, 4, 1, 5, 2])
    };
    let t = transpose(&reshape(x, &split, false)?, &perm)?;
    reshape(&t, &[n, out_c, h * b, w * b], false)
}

/// ONNX SpaceToDepth on NCHW: `b × b` pixel blocks become channels (DCR order).
/// SpaceToDepth: each b×b block of every channel becomes b² channels — block-major (DCR,
/// channel `(by·b + bx)·C + c`) or channel-major (CRD, `c·b² + by·b + bx`).
pub fn space_to_depth(x: &Tensor, b: i64, crd: bool) -> KernelResult<Tensor> {
    let s = x.shape().to_vec();
    let [n, c, h, w] = s[..] else {
        return Err(format!("SpaceToDepth of rank {}", s.len()));
    };
    let bu = b.max(1) as usize;
    if b < 1 || h % bu != 0 || w % bu != 0 {
        return Err(format!("SpaceToDepth blocksize {b} for {h}×{w}"));
    }
    let (n, c, h, w) = (n as i64, c as i64, h as i64, w as i64);
    let t = reshape(x, &[n, c, h / b, b, w / b, b], false)?;
    let perm: &[i64] = if crd { &[0, 1, 3, 5, 2, 4] } else { &[0, 3, 5, 1, 2, 4] };
    let t = transpose(&t, perm)?;
    reshape(&t, &[n, c * b * b, h / b, w / b], false)
}

#[cfg(test)]
mod tests {
    use super::super::join::{concat, pack, split};
    use super::*;
    use ndarray::array;

    #[test]
    fn gathers_agree_with_ndarray_select_on_every_axis() {
        let x = ndarray::Array::from_shape_fn((2, 3, 4), |(a, b, c)| (a * 100 + b * 10 + c) as i32).into_dyn();
        for axis in 0..3 {
            let n = x.shape()[axis];
            let idx: Vec<usize> = (0..n).rev().chain(0..n).chain([n - 1, 0]).collect();
            assert_eq!(gather_axis(&x, axis, &idx), x.select(Axis(axis), &idx), "axis {axis}");
        }
        // a transposed (not C-order) input
        let t = x.clone().permuted_axes(vec![2, 0, 1]);
        assert_eq!(gather_axis(&t, 1, &[1, 0, 1]), t.select(Axis(1), &[1, 0, 1]));
        // identity maps are skipped, the others applied
        let maps = vec![vec![0, 1], vec![2, 1, 0], vec![0, 1, 2, 3]];
        let got = gather_axes(&Tensor::I32(x.clone()), &maps);
        assert_eq!(got, Tensor::I32(x.select(Axis(1), &[2, 1, 0])));
    }

    #[test]
    fn slices_agree_with_ndarray_on_every_step_and_trailing_unit_axes() {
        // [2, 5, 7, 1]: steps ±1, ±2, 3 on each axis, the lane path and the element path
        let x = ndarray::Array::from_shape_fn((2, 5, 7, 1), |(a, b, c, _)| (a * 100 + b * 10 + c) as i32).into_dyn();
        for &(s1, s2) in &[(1, 1), (2, 1), (1, 2), (2, 3), (-1, 1), (1, -2), (-2, -1)] {
            let r = |n: isize, s: isize| if s > 0 { (0, n, s) } else { (n - 1, -1, s) };
            let ranges = [(0, 2, 1), r(5, s1), r(7, s2), (0, 1, 1)];
            let want = x.slice(ndarray::s![.., ..;s1, ..;s2, ..]).to_owned().into_dyn();
            let got = slice_axes(&Tensor::I32(x.clone()), &ranges, want.shape()).unwrap();
            assert_eq!(got, Tensor::I32(want), "steps {s1}, {s2}");
        }
    }

    fn t(v: Vec<i32>, s: &[usize]) -> Tensor {
        Tensor::I32(ArrayD::from_shape_vec(IxDyn(s), v).unwrap())
    }
    fn vals(x: &Tensor) -> Vec<i64> {
        super::super::ints_of(x).unwrap()
    }

    #[test]
    fn strided_slice_masks() {
        let x = t((0..24).collect(), &[2, 3, 4]);
        // x[:, 1:, ::2]
        let r = strided_slice(
            &x,
            &[0, 1, 0],
            &[0, 3, 0],
            &[1, 1, 2],
            StridedMasks {
                begin: 0b101,
                end: 0b101,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(r.shape(), &[2, 2, 2]);
        assert_eq!(vals(&r), vec![4, 6, 8, 10, 16, 18, 20, 22]);
        // x[1, ..., ::-1] (shrink 0, ellipsis, reverse last)
        let r = strided_slice(
            &x,
            &[1, 0, -1],
            &[2, 0, 0],
            &[1, 1, -1],
            StridedMasks {
                ellipsis: 0b010,
                shrink_axis: 0b001,
                end: 0b100,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(r.shape(), &[3, 4]);
        assert_eq!(vals(&r)[..4], [15, 14, 13, 12]);
        // x[:, tf.newaxis, 2] → shape [2, 1, 4]
        let r = strided_slice(
            &x,
            &[0, 0, 2],
            &[0, 0, 3],
            &[1, 1, 1],
            StridedMasks {
                begin: 1,
                end: 1,
                new_axis: 0b010,
                shrink_axis: 0b100,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(r.shape(), &[2, 1, 4]);
        assert_eq!(vals(&r), vec![8, 9, 10, 11, 20, 21, 22, 23]);
        // x[0, 3:0:-2] on the middle dim clamps to 2
        let r = strided_slice(
            &x,
            &[0, 3, 0],
            &[1, 0, 1],
            &[1, -2, 1],
            StridedMasks {
                shrink_axis: 0b101,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(vals(&r), vec![8]);
    }

    #[test]
    fn pads_tiles_gathers() {
        let x = t(vec![1, 2, 3], &[3]);
        assert_eq!(vals(&pad(&x, &[1, 2], 0.0).unwrap()), vec![0, 1, 2, 3, 0, 0]);
        assert_eq!(
            vals(&mirror_pad(&x, &[2, 2], false).unwrap()),
            vec![3, 2, 1, 2, 3, 2, 1]
        );
        assert_eq!(vals(&mirror_pad(&x, &[2, 2], true).unwrap()), vec![2, 1, 1, 2, 3, 3, 2]);
        assert_eq!(vals(&tile(&x, &[2]).unwrap()), vec![1, 2, 3, 1, 2, 3]);
        let m = t((0..6).collect(), &[2, 3]);
        let g = gather(&m, &[2, 0, -1], &[3], 1).unwrap();
        assert_eq!(g.shape(), &[2, 3]);
        assert_eq!(vals(&g), vec![2, 0, 2, 5, 3, 5]);
        assert!(gather(&m, &[3], &[1], 1).is_err());
        let parts = split(&m, 1, &[1, -1]).unwrap();
        assert_eq!((vals(&parts[0]), vals(&parts[1])), (vec![0, 3], vec![1, 2, 4, 5]));
        assert_eq!(vals(&transpose(&m, &[1, 0]).unwrap()), vec![0, 3, 1, 4, 2, 5]);
        assert_eq!(reshape(&m, &[-1], false).unwrap().shape(), &[6]);
        assert!(reshape(&m, &[4, -1], false).is_err());
        let c = concat(&[&m, &m], 0).unwrap();
        assert_eq!(c.shape(), &[4, 3]);
        let p = pack(&[&x, &x], 1).unwrap();
        assert_eq!(vals(&p), vec![1, 1, 2, 2, 3, 3]);
        let f = Tensor::F32(array![1.7f32, -1.7, f32::NAN].into_dyn());
        assert_eq!(vals(&cast(&f, DType::I32).unwrap()), vec![1, -1, 0]);
    }
}
