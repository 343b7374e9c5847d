//! Rotary position embedding (ONNX RotaryEmbedding, opset 23): the first `rotary_dim` values
//! of each head are rotated pairwise by the angle the cos/sin caches hold for the token's
//! position — pairs are (i, i + rotary_dim/2), or neighbours (2i, 2i+1) when interleaved.

use super::{from_vec, KernelResult};
use ndarray::ArrayD;

/// Where the cache rows come from: one row per (batch, token) given directly, or picked by
/// position ids from a [max_position, rotary_dim/2] cache.
pub struct Rotary<'a> {
    pub cos: &'a ArrayD<f32>,
    pub sin: &'a ArrayD<f32>,
    pub positions: Option<Vec<i64>>,
    pub interleaved: bool,
    /// 0: the whole head.
    pub rotary_dim: usize,
    /// Heads of a 3-D [batch, seq, hidden] input (a 4-D input says it itself).
    pub num_heads: usize,
}

/// Applies the rotation to `x`: [batch, heads, seq, head] or [batch, seq, heads·head].
pub fn rotary_embedding(x: &ArrayD<f32>, r: &Rotary) -> KernelResult<ArrayD<f32>> {
    let s = x.shape();
    // (batch, seq, heads, head) and the offset of element (b, t, h, d)
    let (b, t, heads, head, four) = match s.len() {
        4 => (s[0], s[2], s[1], s[3], true),
        3 if r.num_heads > 0 && s[2] % r.num_heads == 0 => (s[0], s[1], r.num_heads, s[2] / r.num_heads, false),
        _ => return Err(format!("RotaryEmbedding of shape {s:?} (num_heads = {})", r.num_heads)),
    };
    let at = |bi: usize, ti: usize, hi: usize, di: usize| {
        if four {
            ((bi * heads + hi) * t + ti) * head + di
        } else {
            ((bi * t + ti) * heads + hi) * head + di
        }
    };
    let rd = if r.rotary_dim == 0 { head } else { r.rotary_dim };
    let half = rd / 2;
    if rd > head || rd % 2 != 0 {
        return Err(format!("rotary_embedding_dim {rd} for heads of {head}"));
    }
    let (cos, sin) = (r.cos.as_standard_layout(), r.sin.as_standard_layout());
    let (cv, sv) = (cos.as_slice().ok_or("layout")?, sin.as_slice().ok_or("layout")?);
    if r.cos.shape().last() != Some(&half) || r.sin.shape() != r.cos.shape() {
        return Err(format!(
            "cos/sin caches of shapes {:?} / {:?} for rotary_dim/2 = {half}",
            r.cos.shape(),
            r.sin.shape()
        ));
    }
    let rows = cv.len() / half.max(1);
    let row_of = |bi: usize, ti: usize| -> KernelResult<usize> {
        let row = match &r.positions {
            Some(p) => {
                let v = *p.get(bi * t + ti).ok_or("position_ids do not cover [batch, seq]")?;
                usize::try_from(v).map_err(|_| format!("position id {v}"))?
            }
            None => bi * t + ti,
        };
        if row >= rows {
            return Err(format!("position {row} is beyond the cache's {rows} rows"));
        }
        Ok(row)
    };
    let xv = x.as_standard_layout();
    let xs = xv.as_slice().ok_or("layout")?;
    let mut y = xs.to_vec();
    for bi in 0..b {
        for ti in 0..t {
            let row = row_of(bi, ti)?;
            for hi in 0..heads {
                for i in 0..half {
                    let (p, q) = if r.interleaved {
                        (2 * i, 2 * i + 1)
                    } else {
                        (i, i + half)
                    };
                    let (c, sn) = (cv[row * half + i], sv[row * half + i]);
                    let (x1, x2) = (xs[at(bi, ti, hi, p)], xs[at(bi, ti, hi, q)]);
                    y[at(bi, ti, hi, p)] = c * x1 - sn * x2;
                    y[at(bi, ti, hi, q)] = sn * x1 + c * x2;
                }
            }
        }
    }
    from_vec(s, y)
}
