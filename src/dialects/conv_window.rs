//! How a convolution's attributes describe its window — strides, dilations and padding of its
//! two spatial axes (a 1-D convolution as H = 1) — for ONNX `Conv` and TF's NHWC convolutions:
//! read once here for every pass and kernel that needs the window of a weight's patches.

use crate::ir::attrs::AttrValue;
use std::collections::BTreeMap;

/// Padding of a convolution's two spatial axes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ConvPads {
    /// (before, after) of H and W.
    Explicit([(usize, usize); 2]),
    /// Output ⌈n / stride⌉ long, the odd pixel at the end (`upper`: ONNX SAME_UPPER, TF SAME)
    /// or at the start.
    Same { upper: bool },
}

/// Strides and dilations ([h, w]) and padding of a convolution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConvWindow {
    pub strides: [usize; 2],
    pub dilations: [usize; 2],
    pub pads: ConvPads,
}

/// The window of an ONNX `Conv` (`one_d`: NCL input); `None` for a negative pad, an attribute of
/// the wrong length or an `auto_pad` ONNX does not define.
pub fn onnx_window(attrs: &BTreeMap<String, AttrValue>, one_d: bool) -> Option<ConvWindow> {
    Some(ConvWindow {
        strides: onnx_pair(attrs, "strides", one_d)?,
        dilations: onnx_pair(attrs, "dilations", one_d)?,
        pads: onnx_pads(attrs, one_d)?,
    })
}

/// The window of a TF NHWC convolution; `None` for a form other than [1, h, w, 1] or an
/// unknown padding.
pub fn tf_window(attrs: &BTreeMap<String, AttrValue>) -> Option<ConvWindow> {
    Some(ConvWindow {
        strides: tf_pair(attrs, "strides")?,
        dilations: tf_pair(attrs, "dilations")?,
        pads: tf_pads(attrs)?,
    })
}

fn ints(attrs: &BTreeMap<String, AttrValue>, name: &str) -> Option<Vec<i64>> {
    attrs.get(name).and_then(AttrValue::as_ints)
}

/// [h, w] of an ONNX attribute with one value per spatial axis (a 1-D op as h = 1).
fn onnx_pair(attrs: &BTreeMap<String, AttrValue>, name: &str, one_d: bool) -> Option<[usize; 2]> {
    match (one_d, ints(attrs, name).as_deref()) {
        (_, None) => Some([1, 1]),
        (true, Some([x])) if *x > 0 => Some([1, *x as usize]),
        (false, Some([y, x])) if *y > 0 && *x > 0 => Some([*y as usize, *x as usize]),
        _ => None,
    }
}

/// [h, w] of a TF NHWC attribute [1, h, w, 1].
fn tf_pair(attrs: &BTreeMap<String, AttrValue>, name: &str) -> Option<[usize; 2]> {
    match ints(attrs, name).as_deref() {
        None => Some([1, 1]),
        Some([1, h, w, 1]) if *h > 0 && *w > 0 => Some([*h as usize, *w as usize]),
        _ => None,
    }
}

fn onnx_pads(attrs: &BTreeMap<String, AttrValue>, one_d: bool) -> Option<ConvPads> {
    match attrs.get("auto_pad").and_then(AttrValue::as_str).unwrap_or("NOTSET") {
        "SAME_UPPER" => Some(ConvPads::Same { upper: true }),
        "SAME_LOWER" => Some(ConvPads::Same { upper: false }),
        "VALID" => Some(ConvPads::Explicit([(0, 0); 2])),
        "NOTSET" => {
            let p = ints(attrs, "pads").unwrap_or(vec![0; if one_d { 2 } else { 4 }]);
            if p.iter().any(|v| *v < 0) {
                return None;
            }
            let u = |i: usize| p[i] as usize;
            match (one_d, p.len()) {
                (true, 2) => Some(ConvPads::Explicit([(0, 0), (u(0), u(1))])),
                (false, 4) => Some(ConvPads::Explicit([(u(0), u(2)), (u(1), u(3))])),
                _ => None,
            }
        }
        _ => None,
    }
}

fn tf_pads(attrs: &BTreeMap<String, AttrValue>) -> Option<ConvPads> {
    match attrs.get("padding").and_then(AttrValue::as_str).unwrap_or("VALID") {
        "SAME" => Some(ConvPads::Same { upper: true }),
        "VALID" => Some(ConvPads::Explicit([(0, 0); 2])),
        "EXPLICIT" => match ints(attrs, "explicit_paddings").as_deref() {
            Some([0, 0, t, b, l, r, 0, 0]) if [t, b, l, r].iter().all(|v| **v >= 0) => Some(ConvPads::Explicit([
                (*t as usize, *b as usize),
                (*l as usize, *r as usize),
            ])),
            _ => None,
        },
        _ => None,
    }
}
