//! TensorFlow's TensorProto and AttrValue in MLIR form, as TensorFlow's importer writes them:
//! tensors as dense elements, `list(int)` as `[1, 2]`, shapes as `#tf_type.shape<1x?>`, strings,
//! floats and bools as themselves; type attributes are dropped (result types carry them).

use super::bundle::tf_dtype;
use super::proto::{AttrValue, TensorProto, TensorShapeProto};
use crate::ir::constants::{tensor_from_le, tensor_to_attribute};
use crate::tensor::{DType, Tensor};
use melior::ir::attribute::{
    ArrayAttribute, BoolAttribute, DenseI64ArrayAttribute, FloatAttribute, IntegerAttribute, StringAttribute,
};
use melior::ir::r#type::IntegerType;
use melior::ir::{Attribute, Type};
use melior::Context;

/// Largest constant built by repeating a TensorProto's last typed value (TensorFlow's
/// encoding of splats such as `tf.zeros`).
const MAX_EXPANDED_BYTES: usize = 1 << 30;

/// A tensor of a TensorFlow TensorProto (raw `tensor_content`, or a typed field whose last
/// value repeats to fill the shape, as TensorFlow reads it).
pub fn tensor_value(t: &TensorProto) -> Result<Tensor, String> {
    let dtype = tf_dtype(t.dtype).ok_or_else(|| format!("{} tensors are not supported", super::dtype_name(t.dtype)))?;
    let shape: Vec<usize> = match &t.tensor_shape {
        None => vec![],
        Some(s) => s
            .dims()
            .and_then(|d| d.into_iter().map(|x| x.map(|n| n as usize)).collect())
            .ok_or("a constant's shape is not fully known")?,
    };
    let n = crate::tensor::element_count(&shape).ok_or_else(|| format!("shape {shape:?} is too large"))?;
    if !t.tensor_content.is_empty() {
        return tensor_from_le(dtype, &shape, &t.tensor_content, "constant").map_err(|e| e.to_string());
    }
    // a few values repeated to fill the shape: bounded, so that a corrupt shape cannot ask
    // for unbounded memory
    if n.saturating_mul(dtype.size_bytes()) > MAX_EXPANDED_BYTES {
        return Err(format!(
            "a constant of shape {shape:?} written as repeated values exceeds {} MiB",
            MAX_EXPANDED_BYTES >> 20
        ));
    }
    fn fill<T: Copy>(v: &[T], n: usize, zero: T) -> Result<Vec<T>, String> {
        match v.len() {
            0 => Ok(vec![zero; n]),
            k if k == n => Ok(v.to_vec()),
            k if k < n => Ok(v.iter().copied().chain(std::iter::repeat_n(v[k - 1], n - k)).collect()),
            k => Err(format!("{k} values for {n} elements")),
        }
    }
    let mut bytes = Vec::with_capacity(n * dtype.size_bytes());
    // the repeated values of one `*_val` field, filled out and laid down little-endian
    macro_rules! le {
        ($field:expr, $zero:expr) => {
            fill(&$field, n, $zero)?
                .iter()
                .for_each(|x| bytes.extend(x.to_le_bytes()))
        };
    }
    match dtype {
        DType::F32 => le!(t.float_val, 0.0),
        DType::F64 => le!(t.double_val, 0.0),
        DType::I64 => le!(t.int64_val, 0),
        DType::I32 => le!(t.int_val, 0),
        DType::U32 => le!(t.uint32_val, 0),
        DType::U64 => le!(t.uint64_val, 0),
        DType::I16 | DType::U16 | DType::F16 | DType::BF16 => {
            let v = if matches!(dtype, DType::F16 | DType::BF16) {
                &t.half_val
            } else {
                &t.int_val
            };
            fill(v, n, 0)?
                .iter()
                .for_each(|&x| bytes.extend((x as u16).to_le_bytes()))
        }
        DType::I8 | DType::U8 => fill(&t.int_val, n, 0)?.iter().for_each(|&x| bytes.push(x as u8)),
        DType::I1 => fill(&t.bool_val, n, false)?.iter().for_each(|&x| bytes.push(x as u8)),
    }
    tensor_from_le(dtype, &shape, &bytes, "constant").map_err(|e| e.to_string())
}

fn int_list<'c>(ctx: &'c Context, v: &[i64]) -> Attribute<'c> {
    let items: Vec<Attribute> = v
        .iter()
        .map(|&i| IntegerAttribute::new(IntegerType::new(ctx, 64).into(), i).into())
        .collect();
    ArrayAttribute::new(ctx, &items).into()
}

/// A shape attribute as TensorFlow's importer writes it (`#tf_type.shape<1x?x3>`).
pub fn shape_attr<'c>(ctx: &'c Context, s: &TensorShapeProto) -> Attribute<'c> {
    let text = match s.dims() {
        None => "#tf_type.shape<*>".to_string(),
        Some(d) => format!(
            "#tf_type.shape<{}>",
            d.iter()
                .map(|x| x.map_or("?".into(), |n| n.to_string()))
                .collect::<Vec<_>>()
                .join("x")
        ),
    };
    Attribute::parse(ctx, &text).unwrap_or_else(|| {
        let dims: Vec<i64> = s.dim.iter().map(|d| d.size).collect();
        DenseI64ArrayAttribute::new(ctx, &dims).into()
    })
}

/// An attribute value in MLIR form; None for the ones dropped (types, empty values).
pub fn attribute<'c>(ctx: &'c Context, v: &AttrValue) -> Result<Option<Attribute<'c>>, String> {
    if let Some(l) = &v.list {
        if !l.r#type.is_empty() {
            return Ok(None);
        }
        if !l.func.is_empty() {
            return Err("a list of functions (functional control flow)".into());
        }
        let items: Vec<Attribute> = if !l.s.is_empty() {
            l.s.iter()
                .map(|s| StringAttribute::new(ctx, &String::from_utf8_lossy(s)).into())
                .collect()
        } else if !l.i.is_empty() {
            return Ok(Some(int_list(ctx, &l.i)));
        } else if !l.f.is_empty() {
            l.f.iter()
                .map(|&f| FloatAttribute::new(ctx, Type::float32(ctx), f64::from(f)).into())
                .collect()
        } else if !l.b.is_empty() {
            l.b.iter().map(|&b| BoolAttribute::new(ctx, b).into()).collect()
        } else if !l.shape.is_empty() {
            l.shape.iter().map(|s| shape_attr(ctx, s)).collect()
        } else if !l.tensor.is_empty() {
            let mut items = Vec::new();
            for t in &l.tensor {
                items.push(tensor_to_attribute(ctx, &tensor_value(t)?));
            }
            items
        } else {
            vec![]
        };
        return Ok(Some(ArrayAttribute::new(ctx, &items).into()));
    }
    Ok(Some(if let Some(s) = &v.s {
        StringAttribute::new(ctx, &String::from_utf8_lossy(s)).into()
    } else if let Some(i) = v.i {
        IntegerAttribute::new(IntegerType::new(ctx, 64).into(), i).into()
    } else if let Some(f) = v.f {
        FloatAttribute::new(ctx, Type::float32(ctx), f64::from(f)).into()
    } else if let Some(b) = v.b {
        BoolAttribute::new(ctx, b).into()
    } else if v.r#type.is_some() {
        return Ok(None);
    } else if let Some(s) = &v.shape {
        shape_attr(ctx, s)
    } else if let Some(t) = &v.tensor {
        tensor_to_attribute(ctx, &tensor_value(t)?)
    } else if let Some(f) = &v.func {
        return Err(format!("function attribute '{}' (functional control flow)", f.name));
    } else if v.placeholder.is_some() {
        return Err("an attribute placeholder (a function template)".into());
    } else {
        return Ok(None);
    }))
}
