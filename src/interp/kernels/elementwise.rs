//! Elementwise ops with NumPy broadcasting: binary arithmetic and comparisons, unary math.

use super::{from_vec, KernelResult};
use crate::tensor::{DType, Tensor};
use ndarray::{ArrayD, IxDyn, Zip};

/// The NumPy broadcast of two shapes.
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> KernelResult<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
        let db = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return Err(format!("shapes {a:?} and {b:?} do not broadcast")),
        };
    }
    Ok(out)
}

/// When `small` broadcast to `big` (of `big`'s rank or less) repeats one contiguous block:
/// `(outer, inner)` such that `big` is `[outer, small.len(), inner]` in memory and each value
/// of `small` applies to `inner` consecutive elements. A per-channel `[C]` against `[N, H, W,
/// C]` gives inner = 1; ONNX's `[C, 1, 1]` against `[N, C, H, W]` gives inner = H·W.
fn block_of(small: &[usize], big: &[usize]) -> Option<(usize, usize)> {
    if small.len() > big.len() {
        return None;
    }
    let pad = big.len() - small.len();
    let dim = |i: usize| if i < pad { 1 } else { small[i - pad] };
    let first = (0..big.len()).find(|&i| dim(i) != 1)?;
    let last = (0..big.len()).rev().find(|&i| dim(i) != 1)?;
    if (first..=last).any(|i| dim(i) != big[i]) {
        return None;
    }
    let outer = big[..first].iter().product();
    let inner = big[last + 1..].iter().product();
    Some((outer, inner))
}

/// out = f(a, b) with broadcasting; fast paths for equal shapes, scalars and trailing
/// (per-channel) operands, which cover nearly every op of real models.
pub fn binary<T: Copy, U: Copy + Default>(
    a: &ArrayD<T>,
    b: &ArrayD<T>,
    f: impl Fn(T, T) -> U,
) -> KernelResult<ArrayD<U>> {
    let shape = broadcast_shape(a.shape(), b.shape())?;
    if let (Some(x), Some(y)) = (a.as_slice(), b.as_slice()) {
        if a.shape() == b.shape() {
            return from_vec(&shape, x.iter().zip(y).map(|(&p, &q)| f(p, q)).collect());
        }
        if y.len() == 1 && x.len() == shape.iter().product::<usize>() {
            let q = y[0];
            return from_vec(&shape, x.iter().map(|&p| f(p, q)).collect());
        }
        if x.len() == 1 && y.len() == shape.iter().product::<usize>() {
            let p = x[0];
            return from_vec(&shape, y.iter().map(|&q| f(p, q)).collect());
        }
        if a.shape() == &shape[..] {
            if let Some((_, inner)) = block_of(b.shape(), a.shape()).filter(|_| !x.is_empty()) {
                let mut out = Vec::with_capacity(x.len());
                for row in x.chunks_exact(y.len() * inner) {
                    if inner == 1 {
                        out.extend(row.iter().zip(y).map(|(&p, &q)| f(p, q)));
                    } else {
                        for (plane, &q) in row.chunks_exact(inner).zip(y) {
                            out.extend(plane.iter().map(|&p| f(p, q)));
                        }
                    }
                }
                return from_vec(&shape, out);
            }
        }
        if b.shape() == &shape[..] {
            if let Some((_, inner)) = block_of(a.shape(), b.shape()).filter(|_| !y.is_empty()) {
                let mut out = Vec::with_capacity(y.len());
                for row in y.chunks_exact(x.len() * inner) {
                    if inner == 1 {
                        out.extend(x.iter().zip(row).map(|(&p, &q)| f(p, q)));
                    } else {
                        for (plane, &p) in row.chunks_exact(inner).zip(x) {
                            out.extend(plane.iter().map(|&q| f(p, q)));
                        }
                    }
                }
                return from_vec(&shape, out);
            }
        }
    }
    let av = a.broadcast(IxDyn(&shape)).ok_or("broadcast failed")?;
    let bv = b.broadcast(IxDyn(&shape)).ok_or("broadcast failed")?;
    let mut out = ArrayD::<U>::default(IxDyn(&shape));
    Zip::from(&mut out).and(&av).and(&bv).for_each(|o, &p, &q| *o = f(p, q));
    Ok(out)
}

/// Binary arithmetic ops, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    SquaredDifference,
    Pow,
    FloorDiv,
    FloorMod,
    /// x / y, and 0 where y is 0 (TF's DivNoNan; floats only).
    DivNoNan,
    /// The remainder with the dividend's sign (C's fmod; ONNX Mod with fmod = 1).
    Fmod,
}

fn int_op<T>(op: BinOp) -> KernelResult<fn(T, T) -> T>
where
    T: Copy + PartialOrd + num_like::Int,
{
    Ok(match op {
        BinOp::Add => T::wadd,
        BinOp::Sub => T::wsub,
        BinOp::Mul => T::wmul,
        // TF's Div and ONNX's Div truncate integer quotients toward zero, like C
        BinOp::Div => T::tdiv,
        BinOp::FloorDiv => T::fdiv,
        BinOp::FloorMod => T::fmod,
        BinOp::Max => |a, b| if a > b { a } else { b },
        BinOp::Min => |a, b| if a < b { a } else { b },
        BinOp::SquaredDifference => |a, b| T::wmul(T::wsub(a, b), T::wsub(a, b)),
        BinOp::Pow => T::wpow,
        BinOp::DivNoNan => return Err("integer DivNoNan is not supported".into()),
        BinOp::Fmod => T::tmod,
    })
}

/// Integer helpers with TF's semantics (wrapping arithmetic, floor division; division by zero
/// gives 0 rather than a panic).
mod num_like {
    pub trait Int: Copy {
        fn wadd(a: Self, b: Self) -> Self;
        fn wsub(a: Self, b: Self) -> Self;
        fn wmul(a: Self, b: Self) -> Self;
        fn fdiv(a: Self, b: Self) -> Self;
        fn tdiv(a: Self, b: Self) -> Self;
        fn wpow(a: Self, b: Self) -> Self;
        fn fmod(a: Self, b: Self) -> Self;
        fn tmod(a: Self, b: Self) -> Self;
    }
    macro_rules! int {
        ($($t:ty),*) => {$(
            // the sign tests are always false for the unsigned types
            #[allow(unused_comparisons)]
            impl Int for $t {
                fn wadd(a: Self, b: Self) -> Self { a.wrapping_add(b) }
                fn wsub(a: Self, b: Self) -> Self { a.wrapping_sub(b) }
                fn wmul(a: Self, b: Self) -> Self { a.wrapping_mul(b) }
                fn fdiv(a: Self, b: Self) -> Self { if b == 0 { 0 } else { let q = a.wrapping_div(b); if a.wrapping_rem(b) != 0 && ((a < 0) != (b < 0)) { q - 1 } else { q } } }
                fn fmod(a: Self, b: Self) -> Self { if b == 0 { 0 } else { let r = a.wrapping_rem(b); if r != 0 && ((r < 0) != (b < 0)) { r + b } else { r } } }
                fn tmod(a: Self, b: Self) -> Self { if b == 0 { 0 } else { a.wrapping_rem(b) } }
                fn tdiv(a: Self, b: Self) -> Self { if b == 0 { 0 } else { a.wrapping_div(b) } }
                // a negative exponent has no integer result but for bases ±1 (NumPy refuses
                // it); 0 is what truncating 1/aⁿ gives for every other base
                #[allow(unused_comparisons)]
                fn wpow(a: Self, b: Self) -> Self {
                    if b < 0 {
                        return if a == 1 { 1 } else if a.wrapping_add(1) == 0 && (b as i128) % 2 != 0 { a } else if a.wrapping_add(1) == 0 { 1 } else { 0 };
                    }
                    a.wrapping_pow(u32::try_from(b as i128).unwrap_or(u32::MAX))
                }
            }
        )*};
    }
    int!(i8, u8, i16, u16, i32, u32, i64, u64);
}

macro_rules! float_ops {
    ($name:ident, $t:ident) => {
        /// The float form of each op, in this float type.
        pub fn $name(op: BinOp) -> fn($t, $t) -> $t {
            match op {
                BinOp::Add => |a, b| a + b,
                BinOp::Sub => |a, b| a - b,
                BinOp::Mul => |a, b| a * b,
                BinOp::Div => |a, b| a / b,
                BinOp::Max => |a: $t, b: $t| {
                    if a.is_nan() || b.is_nan() {
                        $t::NAN
                    } else {
                        a.max(b)
                    }
                },
                BinOp::Min => |a: $t, b: $t| {
                    if a.is_nan() || b.is_nan() {
                        $t::NAN
                    } else {
                        a.min(b)
                    }
                },
                BinOp::SquaredDifference => |a, b| (a - b) * (a - b),
                BinOp::Pow => $t::powf,
                BinOp::FloorDiv => |a: $t, b: $t| (a / b).floor(),
                BinOp::DivNoNan => |a: $t, b: $t| if b == 0.0 { 0.0 } else { a / b },
                BinOp::Fmod => |a: $t, b: $t| a % b,
                BinOp::FloorMod => |a: $t, b: $t| {
                    let r = a % b;
                    if r != 0.0 && ((r < 0.0) != (b < 0.0)) {
                        r + b
                    } else {
                        r
                    }
                },
            }
        }
    };
}
float_ops!(float_op, f32);
float_ops!(float_op_f64, f64);

/// Applies a binary arithmetic op to f32, i32 or i64 operands of the same type.
pub fn arith(op: BinOp, a: &Tensor, b: &Tensor) -> KernelResult<Tensor> {
    Ok(match (a, b) {
        // one monomorphised loop per op (a fn pointer would cost a call per element)
        (Tensor::F32(x), Tensor::F32(y)) => Tensor::F32(match op {
            BinOp::Add => binary(x, y, |a, b| a + b)?,
            BinOp::Sub => binary(x, y, |a, b| a - b)?,
            BinOp::Mul => binary(x, y, |a, b| a * b)?,
            BinOp::Div => binary(x, y, |a, b| a / b)?,
            BinOp::SquaredDifference => binary(x, y, |a, b| (a - b) * (a - b))?,
            other => binary(x, y, float_op(other))?,
        }),
        (Tensor::F64(x), Tensor::F64(y)) => Tensor::F64(binary(x, y, float_op_f64(op))?),
        (Tensor::I32(x), Tensor::I32(y)) => Tensor::I32(binary(x, y, int_op::<i32>(op)?)?),
        (Tensor::I64(x), Tensor::I64(y)) => Tensor::I64(binary(x, y, int_op::<i64>(op)?)?),
        (Tensor::I8(x), Tensor::I8(y)) => Tensor::I8(binary(x, y, int_op::<i8>(op)?)?),
        (Tensor::U8(x), Tensor::U8(y)) => Tensor::U8(binary(x, y, int_op::<u8>(op)?)?),
        (Tensor::I16(x), Tensor::I16(y)) => Tensor::I16(binary(x, y, int_op::<i16>(op)?)?),
        (Tensor::U16(x), Tensor::U16(y)) => Tensor::U16(binary(x, y, int_op::<u16>(op)?)?),
        (Tensor::U32(x), Tensor::U32(y)) => Tensor::U32(binary(x, y, int_op::<u32>(op)?)?),
        (Tensor::U64(x), Tensor::U64(y)) => Tensor::U64(binary(x, y, int_op::<u64>(op)?)?),
        _ => return Err(format!("{op:?} of {} and {} is not supported", a.dtype(), b.dtype())),
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Less,
    LessEqual,
    Greater,
    GreaterEqual,
    Equal,
    NotEqual,
}

fn cmp<T: PartialOrd + Copy>(op: CmpOp) -> fn(T, T) -> bool {
    match op {
        CmpOp::Less => |a, b| a < b,
        CmpOp::LessEqual => |a, b| a <= b,
        CmpOp::Greater => |a, b| a > b,
        CmpOp::GreaterEqual => |a, b| a >= b,
        CmpOp::Equal => |a, b| a == b,
        CmpOp::NotEqual => |a, b| a != b,
    }
}

pub fn compare(op: CmpOp, a: &Tensor, b: &Tensor) -> KernelResult<Tensor> {
    Ok(Tensor::I1(match (a, b) {
        (Tensor::F32(x), Tensor::F32(y)) => binary(x, y, cmp(op))?,
        (Tensor::I32(x), Tensor::I32(y)) => binary(x, y, cmp(op))?,
        (Tensor::I64(x), Tensor::I64(y)) => binary(x, y, cmp(op))?,
        (Tensor::I1(x), Tensor::I1(y)) => binary(x, y, cmp(op))?,
        (Tensor::F64(x), Tensor::F64(y)) => binary(x, y, cmp(op))?,
        (Tensor::I8(x), Tensor::I8(y)) => binary(x, y, cmp(op))?,
        (Tensor::U8(x), Tensor::U8(y)) => binary(x, y, cmp(op))?,
        (Tensor::I16(x), Tensor::I16(y)) => binary(x, y, cmp(op))?,
        (Tensor::U16(x), Tensor::U16(y)) => binary(x, y, cmp(op))?,
        (Tensor::U32(x), Tensor::U32(y)) => binary(x, y, cmp(op))?,
        (Tensor::U64(x), Tensor::U64(y)) => binary(x, y, cmp(op))?,
        _ => return Err(format!("{op:?} of {} and {} is not supported", a.dtype(), b.dtype())),
    }))
}

/// A bitwise op on two integer tensors of one type (NumPy broadcasting), through i64 (exact
/// for every integer type quantir holds: the result is cast back).
pub fn bitwise(a: &Tensor, b: &Tensor, f: fn(i64, i64) -> i64) -> KernelResult<Tensor> {
    macro_rules! each {
        ($($v:ident => $t:ty),*) => {
            match (a, b) {
                $((Tensor::$v(x), Tensor::$v(y)) => Ok(Tensor::$v(binary(x, y, |p, q| f(p as i64, q as i64) as $t)?)),)*
                _ => Err(format!("bitwise op of {} and {} is not supported", a.dtype(), b.dtype())),
            }
        };
    }
    each!(I8 => i8, U8 => u8, I16 => i16, U16 => u16, I32 => i32, U32 => u32, I64 => i64, U64 => u64)
}

pub fn logical(a: &Tensor, b: &Tensor, f: fn(bool, bool) -> bool) -> KernelResult<Tensor> {
    match (a, b) {
        (Tensor::I1(x), Tensor::I1(y)) => Ok(Tensor::I1(binary(x, y, f)?)),
        _ => Err("logical ops take i1 operands".into()),
    }
}

/// Unary math ops on f32.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UnOp {
    Relu,
    Relu6,
    Elu,
    LeakyRelu(f32),
    /// γ·x for x > 0, γ·α·(eˣ − 1) otherwise.
    Selu {
        alpha: f32,
        gamma: f32,
    },
    Sigmoid,
    Tanh,
    Erf,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Neg,
    Square,
    Abs,
    Reciprocal,
    Softplus,
    Gelu,
    Floor,
    Ceil,
    Round,
    Sign,
    Sin,
    Cos,
}

/// max(x, 0), NaN kept.
#[inline(always)]
pub fn relu(x: f32) -> f32 {
    if x > 0.0 || x.is_nan() {
        x
    } else {
        0.0
    }
}

/// min(max(x, 0), 6), NaN kept.
#[inline(always)]
pub fn relu6(x: f32) -> f32 {
    if x.is_nan() {
        x
    } else if x < 0.0 {
        0.0
    } else if x > 6.0 {
        6.0
    } else {
        x
    }
}

pub fn unary_fn(op: UnOp) -> Box<dyn Fn(f32) -> f32 + Send + Sync> {
    match op {
        UnOp::Relu => Box::new(relu),
        UnOp::Relu6 => Box::new(relu6),
        UnOp::Elu => Box::new(|x: f32| if x > 0.0 { x } else { x.exp_m1() }),
        UnOp::LeakyRelu(alpha) => Box::new(move |x: f32| if x > 0.0 { x } else { alpha * x }),
        UnOp::Selu { alpha, gamma } => {
            Box::new(move |x: f32| if x > 0.0 { gamma * x } else { gamma * alpha * x.exp_m1() })
        }
        UnOp::Sigmoid => Box::new(|x: f32| 1.0 / (1.0 + (-x).exp())),
        UnOp::Tanh => Box::new(f32::tanh),
        UnOp::Erf => Box::new(super::erf::erf),
        UnOp::Exp => Box::new(f32::exp),
        UnOp::Log => Box::new(f32::ln),
        UnOp::Sqrt => Box::new(f32::sqrt),
        UnOp::Rsqrt => Box::new(|x: f32| 1.0 / x.sqrt()),
        UnOp::Neg => Box::new(|x: f32| -x),
        UnOp::Square => Box::new(|x: f32| x * x),
        UnOp::Abs => Box::new(f32::abs),
        UnOp::Reciprocal => Box::new(|x: f32| 1.0 / x),
        UnOp::Softplus => Box::new(|x: f32| if x > 20.0 { x } else { x.exp().ln_1p() }),
        UnOp::Gelu => Box::new(super::erf::gelu),
        UnOp::Floor => Box::new(f32::floor),
        UnOp::Ceil => Box::new(f32::ceil),
        UnOp::Round => Box::new(f32::round_ties_even),
        UnOp::Sign => Box::new(|x: f32| {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                x
            }
        }),
        UnOp::Sin => Box::new(f32::sin),
        UnOp::Cos => Box::new(f32::cos),
    }
}

/// Applies `f` to every element; a generic closure, so each op's loop is compiled on its own
/// (no call through a pointer per element).
fn map_f32(a: &ArrayD<f32>, f: impl Fn(f32) -> f32) -> ArrayD<f32> {
    a.mapv(f)
}

pub fn unary(op: UnOp, t: &Tensor) -> KernelResult<Tensor> {
    let a = match (op, t) {
        (UnOp::Neg, Tensor::I32(a)) => return Ok(Tensor::I32(a.mapv(i32::wrapping_neg))),
        (UnOp::Neg, Tensor::I64(a)) => return Ok(Tensor::I64(a.mapv(i64::wrapping_neg))),
        (UnOp::Abs, Tensor::I32(a)) => return Ok(Tensor::I32(a.mapv(i32::wrapping_abs))),
        (UnOp::Abs, Tensor::I64(a)) => return Ok(Tensor::I64(a.mapv(i64::wrapping_abs))),
        (_, Tensor::F32(a)) => a,
        _ => return Err(format!("{op:?} of {} is not supported", t.dtype())),
    };
    Ok(Tensor::F32(match op {
        UnOp::Relu => map_f32(a, relu),
        UnOp::Relu6 => map_f32(a, relu6),
        UnOp::Neg => map_f32(a, |x| -x),
        UnOp::Square => map_f32(a, |x| x * x),
        UnOp::Abs => map_f32(a, f32::abs),
        UnOp::Rsqrt => map_f32(a, |x| 1.0 / x.sqrt()),
        UnOp::Sqrt => map_f32(a, f32::sqrt),
        UnOp::Reciprocal => map_f32(a, |x| 1.0 / x),
        UnOp::Erf | UnOp::Gelu => {
            let mut y = a.to_owned();
            apply_in_place(op, &mut y);
            y
        }
        other => {
            let f = unary_fn(other);
            map_f32(a, f)
        }
    }))
}

/// Select(cond, a, b) with broadcasting of all three (TF SelectV2; Select's rank-1 condition
/// picks whole rows and is handled by the caller reshaping it).
pub fn select(c: &Tensor, a: &Tensor, b: &Tensor) -> KernelResult<Tensor> {
    let Tensor::I1(c) = c else {
        return Err(format!("Select condition is {}, expected i1", c.dtype()));
    };
    let shape = broadcast_shape(&broadcast_shape(c.shape(), a.shape())?, b.shape())?;
    let cv = c.broadcast(IxDyn(&shape)).ok_or("broadcast failed")?;
    macro_rules! sel {
        ($x:expr, $y:expr, $v:ident) => {{
            let xv = $x.broadcast(IxDyn(&shape)).ok_or("broadcast failed")?;
            let yv = $y.broadcast(IxDyn(&shape)).ok_or("broadcast failed")?;
            let mut out = ArrayD::default(IxDyn(&shape));
            Zip::from(&mut out)
                .and(&cv)
                .and(&xv)
                .and(&yv)
                .for_each(|o, &c, &p, &q| *o = if c { p } else { q });
            Tensor::$v(out)
        }};
    }
    macro_rules! each {
        ($($v:ident)*) => {
            match (a, b) {
                $((Tensor::$v(x), Tensor::$v(y)) => sel!(x, y, $v),)*
                _ => return Err(format!("Select of {} and {} is not supported", a.dtype(), b.dtype())),
            }
        };
    }
    Ok(each!(F32 F64 F16 BF16 I1 I8 U8 I16 U16 I32 U32 I64 U64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn broadcasting_rules() {
        assert_eq!(broadcast_shape(&[2, 1, 3], &[4, 1]).unwrap(), vec![2, 4, 3]);
        assert!(broadcast_shape(&[2, 3], &[4]).is_err());
        let a = array![[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]].into_dyn();
        let row = array![10.0f32, 20.0, 30.0].into_dyn();
        let col = array![[100.0f32], [200.0]].into_dyn();
        assert_eq!(
            binary(&a, &row, |x, y| x + y).unwrap(),
            array![[11.0f32, 22.0, 33.0], [14.0, 25.0, 36.0]].into_dyn()
        );
        assert_eq!(
            binary(&row, &a, |x, y| x - y).unwrap(),
            array![[9.0f32, 18.0, 27.0], [6.0, 15.0, 24.0]].into_dyn()
        );
        assert_eq!(
            binary(&a, &col, |x, y| x + y).unwrap(),
            array![[101.0f32, 102.0, 103.0], [204.0, 205.0, 206.0]].into_dyn()
        );
        assert_eq!(
            binary(&col, &row, |x, y| x + y).unwrap(),
            array![[110.0f32, 120.0, 130.0], [210.0, 220.0, 230.0]].into_dyn()
        );
        let s = ndarray::arr0(2.0f32).into_dyn();
        assert_eq!(binary(&a, &s, |x, y| x * y).unwrap()[[1, 2]], 12.0);
    }

    #[test]
    fn every_broadcast_of_a_smaller_operand_matches_ndarrays() {
        use crate::interp::kernels::Kernel;
        let big = [2usize, 3, 4, 5];
        let a = ArrayD::from_shape_fn(IxDyn(&big), |i| (i[0] * 60 + i[1] * 20 + i[2] * 5 + i[3]) as f32);
        // every shape of rank ≤ 4 whose dims are big's or 1 (right-aligned)
        for rank in 0..=4usize {
            for mask in 0..(1u32 << rank) {
                let dims: Vec<usize> = (0..rank)
                    .map(|i| if mask & (1 << i) != 0 { big[4 - rank + i] } else { 1 })
                    .collect();
                let b = ArrayD::from_shape_fn(IxDyn(&dims), |i| {
                    1000.0 * (1 + (0..rank).map(|k| i[k] * (k + 1)).sum::<usize>()) as f32
                });
                let bv = b.broadcast(IxDyn(&big)).unwrap();
                let want = ndarray::Zip::from(&a).and(&bv).map_collect(|&p, &q| p - q);
                assert_eq!(binary(&a, &b, |p, q| p - q).unwrap(), want, "{dims:?}");
                let flipped = ndarray::Zip::from(&a).and(&bv).map_collect(|&p, &q| q - p);
                assert_eq!(binary(&b, &a, |p, q| p - q).unwrap(), flipped, "{dims:?} first");
                let k = BinaryKernel(BinOp::Sub);
                let got = k.run_owned(Tensor::F32(a.clone()), &[&Tensor::F32(b.clone())]).unwrap();
                assert_eq!(got, vec![Tensor::F32(want)], "{dims:?} in place");
            }
        }
        // an empty operand broadcasts to an empty result
        let (e, c) = (ArrayD::<f32>::zeros(IxDyn(&[0, 3])), ArrayD::<f32>::ones(IxDyn(&[3])));
        assert_eq!(binary(&e, &c, |p, q| p + q).unwrap().shape(), &[0, 3]);
        assert_eq!(binary(&c, &e, |p, q| p + q).unwrap().shape(), &[0, 3]);
        let k = BinaryKernel(BinOp::Add);
        let got = k.run_owned(Tensor::F32(e.clone()), &[&Tensor::F32(c.clone())]).unwrap();
        assert_eq!(got[0].shape(), &[0, 3]);
    }

    #[test]
    fn integer_floor_semantics() {
        let a = Tensor::I32(array![7, -7, 7, -7].into_dyn());
        let b = Tensor::I32(array![2, 2, -2, -2].into_dyn());
        assert_eq!(
            arith(BinOp::FloorDiv, &a, &b).unwrap(),
            Tensor::I32(array![3, -4, -4, 3].into_dyn())
        );
        assert_eq!(
            arith(BinOp::FloorMod, &a, &b).unwrap(),
            Tensor::I32(array![1, 1, -1, -1].into_dyn())
        );
    }
}

/// A unary f32 op that can run in place.
pub struct UnaryKernel(pub UnOp);

fn apply_in_place(op: UnOp, a: &mut ArrayD<f32>) {
    match op {
        UnOp::Relu => a.mapv_inplace(relu),
        UnOp::Relu6 => a.mapv_inplace(relu6),
        UnOp::Neg => a.mapv_inplace(|x| -x),
        UnOp::Square => a.mapv_inplace(|x| x * x),
        // vectorised over the values in memory order (any contiguous layout)
        UnOp::Erf | UnOp::Gelu => match (op, a.as_slice_memory_order_mut()) {
            (UnOp::Erf, Some(xs)) => super::erf::erf_in_place(xs),
            (_, Some(xs)) => super::erf::gelu_in_place(xs),
            (_, None) => a.mapv_inplace(unary_fn(op)),
        },
        other => {
            let f = unary_fn(other);
            a.mapv_inplace(f)
        }
    }
}

impl super::Kernel for UnaryKernel {
    fn run(&self, inputs: &[&Tensor]) -> KernelResult<Vec<Tensor>> {
        Ok(vec![unary(self.0, inputs.first().ok_or("missing operand #0")?)?])
    }
    fn run_owned(&self, first: Tensor, rest: &[&Tensor]) -> KernelResult<Vec<Tensor>> {
        match first {
            Tensor::F32(mut a) => {
                apply_in_place(self.0, &mut a);
                Ok(vec![Tensor::F32(a)])
            }
            other => self.run(&super::operands(&other, rest)),
        }
    }
    fn reuses_first_operand(&self) -> bool {
        true
    }
    fn layout_free(&self) -> bool {
        true
    }
    /// Operand 0's shape, for f32 (the other types' rules are `unary`'s to apply).
    fn result_shapes(&self, inputs: &[&Tensor]) -> super::ResultShapes {
        match inputs.first() {
            Some(Tensor::F32(a)) => Some(Ok(vec![(DType::F32, a.shape().to_vec())])),
            _ => None,
        }
    }
}

/// A binary arithmetic op that writes into operand 0 when operand 1 broadcasts into it.
pub struct BinaryKernel(pub BinOp);

fn binary_in_place(op: BinOp, a: &mut ArrayD<f32>, b: &ArrayD<f32>) -> bool {
    if b.is_empty() || a.is_empty() {
        return false;
    }
    // a scalar is a block of one value over everything
    let Some((_, inner)) = block_of(b.shape(), a.shape()).or((b.len() == 1).then_some((1, a.len()))) else {
        return false;
    };
    let (Some(x), Some(y)) = (a.as_slice_mut(), b.as_slice()) else {
        return false;
    };
    if x.len() % (y.len() * inner) != 0 {
        return false;
    }
    macro_rules! each {
        ($f:expr) => {{
            let f = $f;
            for row in x.chunks_exact_mut(y.len() * inner) {
                if inner == 1 {
                    for (p, &q) in row.iter_mut().zip(y) {
                        *p = f(*p, q);
                    }
                } else {
                    for (plane, &q) in row.chunks_exact_mut(inner).zip(y) {
                        for p in plane {
                            *p = f(*p, q);
                        }
                    }
                }
            }
        }};
    }
    match op {
        BinOp::Add => each!(|p: f32, q: f32| p + q),
        BinOp::Sub => each!(|p: f32, q: f32| p - q),
        BinOp::Mul => each!(|p: f32, q: f32| p * q),
        BinOp::Div => each!(|p: f32, q: f32| p / q),
        other => each!(float_op(other)),
    }
    true
}

impl super::Kernel for BinaryKernel {
    fn run(&self, inputs: &[&Tensor]) -> KernelResult<Vec<Tensor>> {
        let (a, b) = (
            inputs.first().ok_or("missing operand #0")?,
            inputs.get(1).ok_or("missing operand #1")?,
        );
        Ok(vec![arith(self.0, a, b)?])
    }
    fn run_owned(&self, first: Tensor, rest: &[&Tensor]) -> KernelResult<Vec<Tensor>> {
        let b = rest.first().ok_or("missing operand #1")?;
        match (first, b) {
            (Tensor::F32(mut a), Tensor::F32(bv)) => {
                if a.shape() == broadcast_shape(a.shape(), bv.shape())?.as_slice()
                    && binary_in_place(self.0, &mut a, bv)
                {
                    return Ok(vec![Tensor::F32(a)]);
                }
                Ok(vec![arith(self.0, &Tensor::F32(a), b)?])
            }
            (first, _) => Ok(vec![arith(self.0, &first, b)?]),
        }
    }
    fn reuses_first_operand(&self) -> bool {
        true
    }
    fn layout_free(&self) -> bool {
        true
    }
    /// The broadcast shape, for two f32 operands that broadcast (else `arith` is run and
    /// says what is wrong).
    fn result_shapes(&self, inputs: &[&Tensor]) -> super::ResultShapes {
        match inputs {
            [Tensor::F32(a), Tensor::F32(b)] => {
                let shape = broadcast_shape(a.shape(), b.shape()).ok()?;
                Some(Ok(vec![(DType::F32, shape)]))
            }
            _ => None,
        }
    }
}
