//! Matrix products through the `gemm` crate (AVX-512 / AVX2 / portable kernels chosen at run
//! time), single-threaded per call: quantir parallelises over samples, so results never depend
//! on the thread count.

use super::elementwise::broadcast_shape;
use super::packed_gemm::{gemm_packed, row_block, PackOnce, PackedMatrix, Strides};
use super::{from_vec, KernelResult};
use crate::tensor::{DType, Tensor};
use ndarray::Axis;
use ndarray::{ArrayD, ArrayViewD, IxDyn};

/// c[m×n] = a[m×k] · b[k×n] for row-major slices with explicit row/column strides, overwriting c.
#[allow(clippy::too_many_arguments)]
pub fn gemm_strided(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    a_rs: isize,
    a_cs: isize,
    b: &[f32],
    b_rs: isize,
    b_cs: isize,
    c: &mut [f32],
) {
    assert!(c.len() >= m * n, "gemm output too small");
    // SAFETY: c holds m·n writable values (checked above)
    unsafe { gemm_strided_into(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, c.as_mut_ptr()) }
}

/// [`gemm_strided`] into raw memory that is only written, never read: the m·n results may go
/// to a buffer that was never initialised (no zero-fill before a GEMM that overwrites it all).
///
/// # Safety
/// `c` must be valid for writes of m·n consecutive f32 values and must not alias `a` or `b`;
/// the strides must keep every index inside `a` and `b`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_strided_into(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    a_rs: isize,
    a_cs: isize,
    b: &[f32],
    b_rs: isize,
    b_cs: isize,
    c: *mut f32,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        // SAFETY: the caller guarantees m·n writable values at c
        unsafe { std::ptr::write_bytes(c, 0, m * n) };
        return;
    }
    // SAFETY: the caller guarantees the output and strides; with read_dst = false gemm only
    // writes c
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c,
            1,
            n as isize,
            false,
            a.as_ptr(),
            a_cs,
            a_rs,
            b.as_ptr(),
            b_cs,
            b_rs,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

/// c[m×n] += a[m×k] · b[k×n] for row-major `c` and strided `a`, `b` (as [`gemm_strided`]).
#[allow(clippy::too_many_arguments)]
pub fn gemm_strided_add(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    (a_rs, a_cs): (usize, usize),
    b: &[f32],
    (b_rs, b_cs): (usize, usize),
    c: &mut [f32],
) {
    if m == 0 || n == 0 || k == 0 {
        return;
    }
    let reach = |rows: usize, cols: usize, rs: usize, cs: usize| (rows - 1) * rs + (cols - 1) * cs;
    assert!(
        c.len() >= m * n && reach(m, k, a_rs, a_cs) < a.len() && reach(k, n, b_rs, b_cs) < b.len(),
        "gemm_strided_add: {m}×{k} · {k}×{n} past its operands"
    );
    // SAFETY: every index is inside its slice (checked above) and `c` is a distinct &mut;
    // gemm computes c = 1·c + 1·a·b
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            true,
            a.as_ptr(),
            a_cs as isize,
            a_rs as isize,
            b.as_ptr(),
            b_cs as isize,
            b_rs as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

/// Row-major c = a · b.
pub fn gemm_rm(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    gemm_strided(m, n, k, a, k as isize, 1, b, n as isize, 1, c)
}

/// 2-D matmul with TF's transpose flags.
pub fn matmul(a: &ArrayD<f32>, b: &ArrayD<f32>, ta: bool, tb: bool) -> KernelResult<ArrayD<f32>> {
    if a.ndim() != 2 || b.ndim() != 2 {
        return Err(format!(
            "MatMul needs rank-2 operands, got {:?} and {:?}",
            a.shape(),
            b.shape()
        ));
    }
    batch_matmul(a, b, ta, tb)
}

/// Batched matmul over the leading dims with NumPy broadcasting (TF BatchMatMulV2 adj flags,
/// ONNX MatMul); rank-1 operands are not promoted (callers reshape).
pub fn batch_matmul(a: &ArrayD<f32>, b: &ArrayD<f32>, ta: bool, tb: bool) -> KernelResult<ArrayD<f32>> {
    batch_matmul_views(a.view(), b.view(), ta, tb)
}

/// Batch dims, m, k and n of a batched product of operands shaped `a` and `b` (transposed as
/// `ta`, `tb` say); the error [`batch_matmul`] gives when they do not fit.
fn product_dims(a: &[usize], b: &[usize], ta: bool, tb: bool) -> KernelResult<(Vec<usize>, usize, usize, usize)> {
    let (ra, rb) = (a.len(), b.len());
    if ra < 2 || rb < 2 {
        return Err(format!("batch matmul needs rank ≥ 2 operands, got {a:?} and {b:?}"));
    }
    let (am, ak) = (a[ra - 2], a[ra - 1]);
    let (bk, bn) = (b[rb - 2], b[rb - 1]);
    let (m, k) = if ta { (ak, am) } else { (am, ak) };
    let (k2, n) = if tb { (bn, bk) } else { (bk, bn) };
    if k != k2 {
        return Err(format!(
            "inner dimensions differ: {a:?}{} · {b:?}{}",
            if ta { "ᵀ" } else { "" },
            if tb { "ᵀ" } else { "" }
        ));
    }
    let batch = broadcast_shape(&a[..ra - 2], &b[..rb - 2])?;
    Ok((batch, m, k, n))
}

/// [`batch_matmul`] on views: an operand without batch dims (a weight matrix) is read in
/// place for every batch, never copied once per batch or at all.
fn batch_matmul_views(a: ArrayViewD<'_, f32>, b: ArrayViewD<'_, f32>, ta: bool, tb: bool) -> KernelResult<ArrayD<f32>> {
    let (batch, m, k, n) = product_dims(a.shape(), b.shape(), ta, tb)?;
    let (ra, rb) = (a.ndim(), b.ndim());
    let (am, ak) = (a.shape()[ra - 2], a.shape()[ra - 1]);
    let (bk, bn) = (b.shape()[rb - 2], b.shape()[rb - 1]);
    let nb: usize = batch.iter().product();
    let a_full: Vec<usize> = batch.iter().copied().chain([am, ak]).collect();
    let b_full: Vec<usize> = batch.iter().copied().chain([bk, bn]).collect();
    // a rank-2 operand is the same matrix for every batch: offset 0, not a broadcast copy
    let (a_step, b_step) = (if ra == 2 { 0 } else { am * ak }, if rb == 2 { 0 } else { bk * bn });
    let ab = if ra == 2 {
        a.view()
    } else {
        a.broadcast(IxDyn(&a_full)).ok_or("broadcast failed")?
    };
    let bb = if rb == 2 {
        b.view()
    } else {
        b.broadcast(IxDyn(&b_full)).ok_or("broadcast failed")?
    };
    let (av, bv) = (ab.as_standard_layout(), bb.as_standard_layout());
    let (asl, bsl) = (av.as_slice().ok_or("layout")?, bv.as_slice().ok_or("layout")?);
    let mut out = vec![0f32; nb * m * n];
    let (a_rs, a_cs) = if ta { (1, ak as isize) } else { (ak as isize, 1) };
    let (b_rs, b_cs) = if tb { (1, bn as isize) } else { (bn as isize, 1) };
    for i in 0..nb {
        gemm_strided(
            m,
            n,
            k,
            &asl[i * a_step..],
            a_rs,
            a_cs,
            &bsl[i * b_step..],
            b_rs,
            b_cs,
            &mut out[i * m * n..(i + 1) * m * n],
        );
    }
    let shape: Vec<usize> = batch.into_iter().chain([m, n]).collect();
    from_vec(&shape, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::kernels::Kernel;
    use ndarray::array;

    fn filled(shape: &[usize]) -> Tensor {
        Tensor::F32(ArrayD::from_shape_fn(IxDyn(shape), |i| (i[0] as f32).sin()))
    }

    /// The shape a product's kernel says is the shape it computes, for NumPy's rank-1 rules,
    /// broadcast batch dims and transposes; where the kernel refuses, so does the shape.
    #[test]
    fn result_shapes_are_the_shapes_the_products_compute() {
        let numpy: [(&[usize], &[usize]); 9] = [
            (&[3], &[3]),
            (&[3], &[3, 4]),
            (&[2, 5, 3], &[3]),
            (&[4, 3], &[3, 2]),
            (&[2, 1, 4, 3], &[5, 3, 2]),
            (&[7, 4, 3], &[3, 2]),
            (&[4, 3], &[4, 3]),
            (&[2, 4, 3], &[3, 3, 2]),
            (&[3], &[2, 3, 4]),
        ];
        let batched: [(&[usize], &[usize], bool, bool); 5] = [
            (&[4, 3], &[3, 2], false, false),
            (&[4, 3], &[2, 3], false, true),
            (&[3, 4], &[2, 3], true, true),
            (&[2, 1, 3, 4], &[5, 3, 6], true, false),
            (&[4, 3], &[4, 3], false, false),
        ];
        let check = |p: Product, a: &[usize], b: &[usize]| {
            let (a, b) = (filled(a), filled(b));
            // with operand 1 a constant (packed when rank 2): the same values
            let (k, packed) = (MatMulKernel::new(p, None), MatMulKernel::new(p, Some(&b)));
            let values = |k: &MatMulKernel| k.run(&[&a, &b]).map(|r| r[0].as_f32().unwrap().clone());
            assert_eq!(values(&k), values(&packed), "{:?} · {:?} packed", a.shape(), b.shape());
            // an untransposed A against a rank-2 B (these are small) took the packed GEMM
            let took = packed.packed.as_ref().is_some_and(|(_, once)| once.is_packed());
            let ta = matches!(p, Product::Batched { ta: true, .. });
            let fits = a.shape().len() == 2 || !matches!(p, Product::Batched { rank2: true, .. });
            assert_eq!(
                took,
                b.shape().len() == 2 && !ta && fits && values(&k).is_ok(),
                "{:?} · {:?}",
                a.shape(),
                b.shape()
            );
            let run = k.run(&[&a, &b]).map(|r| vec![(DType::F32, r[0].shape().to_vec())]);
            assert_eq!(
                k.result_shapes(&[&a, &b]).unwrap(),
                run,
                "{:?} · {:?}",
                a.shape(),
                b.shape()
            );
        };
        for (a, b) in numpy {
            check(Product::Numpy, a, b);
        }
        for (a, b, ta, tb) in batched {
            for rank2 in [false, true] {
                if rank2 && (a.len() != 2 || b.len() != 2) {
                    continue;
                }
                check(Product::Batched { ta, tb, rank2 }, a, b);
            }
        }
    }

    #[test]
    fn a_matrix_without_batch_dims_serves_every_batch_of_the_other_operand() {
        let x = ArrayD::from_shape_fn(IxDyn(&[3, 2, 4]), |i| (i[0] * 8 + i[1] * 4 + i[2]) as f32 - 7.0);
        let w = ArrayD::from_shape_fn(IxDyn(&[4, 5]), |i| (i[0] * 5 + i[1]) as f32 * 0.5 - 3.0);
        let w2 = w.clone().into_dimensionality::<ndarray::Ix2>().unwrap();
        let xw = batch_matmul(&x, &w, false, false).unwrap();
        let wt = w.t().to_owned().into_dyn(); // [5, 4]
        let wx = batch_matmul(
            &wt,
            &x.clone()
                .permuted_axes(IxDyn(&[0, 2, 1]))
                .as_standard_layout()
                .into_owned(),
            false,
            false,
        )
        .unwrap();
        for i in 0..3 {
            let xi = x
                .index_axis(Axis(0), i)
                .to_owned()
                .into_dimensionality::<ndarray::Ix2>()
                .unwrap();
            assert_eq!(xw.index_axis(Axis(0), i), xi.dot(&w2).into_dyn());
            assert_eq!(wx.index_axis(Axis(0), i), w2.t().dot(&xi.t()).into_dyn());
        }
        // NumPy's 1-D rules on top: [4] · [4, 5] → [5]
        let v = Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[4]), vec![1.0, 0.0, -1.0, 2.0]).unwrap());
        let Tensor::F32(y) = numpy_matmul(&v, &Tensor::F32(w.clone())).unwrap() else {
            panic!()
        };
        let v2 = ndarray::arr1(&[1.0f32, 0.0, -1.0, 2.0]);
        assert_eq!(y, v2.dot(&w2).into_dyn());
    }

    #[test]
    fn transposes_and_broadcast_batches() {
        let a = array![[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]].into_dyn();
        let b = array![[1.0f32, 0.0], [0.0, 1.0], [1.0, 1.0]].into_dyn();
        let c = matmul(&a, &b, false, false).unwrap();
        assert_eq!(c, array![[4.0f32, 5.0], [10.0, 11.0]].into_dyn());
        let at = a.t().to_owned().into_dyn();
        let bt = b.t().to_owned().into_dyn();
        assert_eq!(matmul(&at, &bt, true, true).unwrap(), c);
        // [2,1,2,3] x [3,3,2] -> [2,3,2,2]
        let a4 = ArrayD::from_shape_fn(IxDyn(&[2, 1, 2, 3]), |i| (i[0] * 6 + i[2] * 3 + i[3]) as f32);
        let b3 = ArrayD::from_shape_fn(IxDyn(&[3, 3, 2]), |i| (i[0] + i[1] * 2 + i[2]) as f32);
        let r = batch_matmul(&a4, &b3, false, false).unwrap();
        assert_eq!(r.shape(), &[2, 3, 2, 2]);
        for (p, q) in [(0usize, 0usize), (1, 2)] {
            let am = a4
                .index_axis(ndarray::Axis(0), p)
                .index_axis(ndarray::Axis(0), 0)
                .to_owned()
                .into_dimensionality::<ndarray::Ix2>()
                .unwrap();
            let bm = b3
                .index_axis(ndarray::Axis(0), q)
                .to_owned()
                .into_dimensionality::<ndarray::Ix2>()
                .unwrap();
            let want = am.dot(&bm);
            let got = r
                .index_axis(ndarray::Axis(0), p)
                .index_axis(ndarray::Axis(0), q)
                .to_owned()
                .into_dimensionality::<ndarray::Ix2>()
                .unwrap();
            assert_eq!(got, want);
        }
    }
}

/// NumPy matmul: 1-D operands get a unit dim that is dropped again, batch dims broadcast.
pub fn numpy_matmul(a: &Tensor, b: &Tensor) -> KernelResult<Tensor> {
    let (Tensor::F32(a), Tensor::F32(b)) = (a, b) else {
        return Err(format!("MatMul of {} and {}", a.dtype(), b.dtype()));
    };
    let (a1, b1) = (a.ndim() == 1, b.ndim() == 1);
    // views: the weight operand of a model's MatMul is a constant, never copied per run
    let a2 = if a1 { a.view().insert_axis(Axis(0)) } else { a.view() };
    let b2 = if b1 { b.view().insert_axis(Axis(1)) } else { b.view() };
    let y = batch_matmul_views(a2, b2, false, false)?;
    // the unit dims a rank-1 operand got are dropped again, as the shape rule says
    let shape = numpy_matmul_shape(a.shape(), b.shape())?;
    Ok(Tensor::F32(
        y.into_shape_with_order(IxDyn(&shape)).map_err(|e| e.to_string())?,
    ))
}

/// The result shape of [`numpy_matmul`] on operands of these shapes, without the product.
pub fn numpy_matmul_shape(a: &[usize], b: &[usize]) -> KernelResult<Vec<usize>> {
    let (a1, b1) = (a.len() == 1, b.len() == 1);
    let a2: Vec<usize> = if a1 { [&[1], a].concat() } else { a.to_vec() };
    let b2: Vec<usize> = if b1 { [b, &[1]].concat() } else { b.to_vec() };
    let (mut shape, m, _, n) = product_dims(&a2, &b2, false, false)?;
    // the unit dims a rank-1 operand got are dropped again
    if !a1 {
        shape.push(m);
    }
    if !b1 {
        shape.push(n);
    }
    Ok(shape)
}

/// Which matrix product a [`MatMulKernel`] computes.
#[derive(Debug, Clone, Copy)]
pub enum Product {
    /// ONNX MatMul: NumPy's matmul ([`numpy_matmul`]).
    Numpy,
    /// TF MatMul (`rank2`) and BatchMatMul: [`batch_matmul`] with its operands transposed as
    /// `ta` and `tb` say.
    Batched { ta: bool, tb: bool, rank2: bool },
}

/// A matrix product whose result shape is known without computing it
/// ([`Kernel::result_shapes`](super::Kernel::result_shapes)), for type inference.
pub struct MatMulKernel {
    product: Product,
    /// For a constant rank-2 right operand: its shape, and it packed on first use (as the
    /// product reads it, transposed if `tb`). A classifier's [1, k] · [k, n] would otherwise
    /// pack all of B for one row of A.
    packed: Option<(Vec<usize>, PackOnce)>,
}

/// Most bytes of packed B for which [`MatMulKernel`] takes the packed GEMM whatever the rows
/// of A: B then stays in L2 while every block of A's rows passes over it. Beyond that it is
/// taken only for as many rows as one block of [`gemm_packed`] holds (B is then read once).
const PACKED_B_CACHED_BYTES: usize = 256 * 1024;

impl MatMulKernel {
    /// The product `product` computes, with operand 1 the constant `b` where it is one.
    pub fn new(product: Product, b: Option<&Tensor>) -> MatMulKernel {
        let packed = match b {
            Some(Tensor::F32(b)) if b.ndim() == 2 => Some((b.shape().to_vec(), PackOnce::default())),
            _ => None,
        };
        MatMulKernel { product, packed }
    }

    /// The constant B of `product` as [k, n] rows, packed.
    fn pack(b: &ArrayD<f32>, product: Product) -> Option<PackedMatrix> {
        let rows = match product {
            Product::Batched { tb: true, .. } => b.t().as_standard_layout().into_owned(),
            _ => b.as_standard_layout().into_owned(),
        };
        PackedMatrix::new(rows.as_slice()?, rows.shape()[0], rows.shape()[1])
    }

    /// A · B through the packed B: every row of A (all batch dims and m, A untransposed and in
    /// C order) against it; `None` where the packed path does not apply.
    fn packed_product(&self, x: &[&Tensor]) -> Option<KernelResult<Tensor>> {
        let (shape, once) = self.packed.as_ref()?;
        let (Some(Tensor::F32(a)), Some(Tensor::F32(b))) = (x.first(), x.get(1)) else {
            return None;
        };
        // the shapes the unpacked path takes with a rank-2 B (it gives the errors otherwise)
        let fits = match self.product {
            Product::Numpy => a.ndim() >= 1,
            Product::Batched {
                ta: false, rank2: true, ..
            } => a.ndim() == 2,
            Product::Batched {
                ta: false,
                rank2: false,
                ..
            } => a.ndim() >= 2,
            Product::Batched { ta: true, .. } => false,
        };
        if !fits || b.shape() != shape.as_slice() {
            return None;
        }
        let tb = matches!(self.product, Product::Batched { tb: true, .. });
        let (k, n) = if tb { (shape[1], shape[0]) } else { (shape[0], shape[1]) };
        let &last = a.shape().last()?;
        let rows = a.len() / k.max(1);
        let cached = k * n.next_multiple_of(16) * 4 <= PACKED_B_CACHED_BYTES;
        if last != k || k == 0 || !(cached || rows <= row_block(k)) {
            return None;
        }
        let packed = once.get(|| Self::pack(b, self.product))?;
        let a = a.as_standard_layout();
        let av = a.as_slice()?;
        let mut out: Vec<f32> = Vec::with_capacity(rows * n);
        // SAFETY: A is rows × k in C order inside `av`; C is rows × n inside `out`'s capacity,
        // written whole before its length is set
        let done = unsafe {
            let r = gemm_packed(
                rows,
                av.as_ptr(),
                Strides { rs: k as isize, cs: 1 },
                packed,
                out.as_mut_ptr(),
                Strides { rs: n as isize, cs: 1 },
                None,
            );
            if r.is_ok() {
                out.set_len(rows * n);
            }
            r
        };
        let mut dims = a.shape()[..a.ndim() - 1].to_vec();
        dims.push(n);
        Some(done.and_then(|()| from_vec(&dims, out)).map(Tensor::F32))
    }
}

impl super::Kernel for MatMulKernel {
    fn run(&self, x: &[&Tensor]) -> KernelResult<Vec<Tensor>> {
        if let Some(y) = self.packed_product(x) {
            return Ok(vec![y?]);
        }
        let operand = |i: usize| x.get(i).copied().ok_or_else(|| format!("missing operand #{i}"));
        Ok(vec![match self.product {
            Product::Numpy => numpy_matmul(operand(0)?, operand(1)?)?,
            Product::Batched { ta, tb, rank2 } => {
                let (a, b) = (super::f32_arg(x, 0)?, super::f32_arg(x, 1)?);
                Tensor::F32(match rank2 {
                    true => matmul(a, b, ta, tb)?,
                    false => batch_matmul(a, b, ta, tb)?,
                })
            }
        }])
    }

    fn result_shapes(&self, x: &[&Tensor]) -> Option<KernelResult<Vec<(DType, Vec<usize>)>>> {
        let (Ok(a), Ok(b)) = (super::f32_arg(x, 0), super::f32_arg(x, 1)) else {
            return None;
        };
        let shape = match self.product {
            Product::Numpy => numpy_matmul_shape(a.shape(), b.shape()),
            Product::Batched { rank2: true, .. } if a.ndim() != 2 || b.ndim() != 2 => return None,
            Product::Batched { ta, tb, .. } => {
                product_dims(a.shape(), b.shape(), ta, tb).map(|(batch, m, _, n)| [batch, vec![m, n]].concat())
            }
        };
        Some(shape.map(|s| vec![(DType::F32, s)]))
    }
}
