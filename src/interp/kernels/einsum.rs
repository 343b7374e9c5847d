//! Einsum for one or two operands: `...` and implicit outputs are written out as labels,
//! repeated labels within an operand become its diagonal; then the labels only one operand
//! has are summed, and the contraction maps onto a batched GEMM
//! (batch · left · contracted × batch · contracted · right) permuted to the output order.

use super::layout::{reshape, transpose};
use super::matmul::batch_matmul;
use super::reduce::{reduce, Reduce};
use super::{f32_arg, KernelResult};
use crate::tensor::Tensor;
use ndarray::Dimension;

/// The operands' labels and the output's, with `...` expanded to fresh labels (the same ones
/// for every operand, right-aligned, so that batch dims line up) and an implicit output (no
/// `->`) written out as NumPy defines it: the ellipsis, then the labels used once, sorted.
fn parse(eq: &str, ranks: &[usize]) -> KernelResult<(Vec<Vec<char>>, Vec<char>)> {
    let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, out) = match eq.split_once("->") {
        Some((l, o)) => (l, Some(o)),
        None => (eq.as_str(), None),
    };
    let raw: Vec<&str> = lhs.split(',').collect();
    if raw.len() != ranks.len() {
        return Err(format!(
            "einsum '{eq}' names {} operands, got {}",
            raw.len(),
            ranks.len()
        ));
    }
    let fresh: Vec<char> = ('A'..='Z').chain('a'..='z').filter(|c| !eq.contains(*c)).collect();
    let mut widest = 0;
    let mut ins = Vec::new();
    for (k, part) in raw.iter().enumerate() {
        let (named, ellipsis) = match part.split_once("...") {
            Some((a, b)) => (a.chars().chain(b.chars()).count(), Some((a, b))),
            None => (part.chars().count(), None),
        };
        ins.push(match ellipsis {
            None => part.chars().collect::<Vec<char>>(),
            Some((a, b)) => {
                let n = ranks[k]
                    .checked_sub(named)
                    .ok_or_else(|| format!("einsum '{eq}': operand #{k} has rank {}", ranks[k]))?;
                if n > fresh.len() {
                    return Err(format!("einsum '{eq}': too many dims under '...'"));
                }
                widest = widest.max(n);
                let mid = fresh[fresh.len() - n..].iter().copied();
                a.chars().chain(mid).chain(b.chars()).collect()
            }
        });
    }
    let batch: Vec<char> = fresh[fresh.len() - widest..].to_vec();
    let out: Vec<char> = match out {
        Some(o) => match o.split_once("...") {
            Some((a, b)) => a.chars().chain(batch.iter().copied()).chain(b.chars()).collect(),
            None => o.chars().collect(),
        },
        None => {
            let mut once: Vec<char> = ins
                .iter()
                .flatten()
                .copied()
                .filter(|c| !batch.contains(c) && ins.iter().flatten().filter(|d| *d == c).count() == 1)
                .collect();
            once.sort_unstable();
            batch.iter().copied().chain(once).collect()
        }
    };
    for l in ins.iter().chain(std::iter::once(&out)) {
        if l.iter().any(|c| !c.is_ascii_alphabetic()) {
            return Err(format!("einsum '{eq}': labels must be letters"));
        }
    }
    let mut o = out.clone();
    o.sort_unstable();
    o.dedup();
    if o.len() != out.len() {
        return Err(format!("einsum '{eq}': a label repeats in the output"));
    }
    Ok((ins, out))
}

/// `t` with a repeated label reduced to its diagonal (`ii` → `i`), until no label repeats.
fn diagonals(t: &Tensor, labels: &[char]) -> KernelResult<(Tensor, Vec<char>)> {
    let (mut t, mut labels) = (t.clone(), labels.to_vec());
    while let Some((p, q)) = (0..labels.len())
        .flat_map(|p| (p + 1..labels.len()).map(move |q| (p, q)))
        .find(|&(p, q)| labels[p] == labels[q])
    {
        let Tensor::F32(a) = &t else {
            return Err("einsum takes f32 operands".into());
        };
        if a.shape()[p] != a.shape()[q] {
            return Err(format!(
                "einsum: label '{}' has sizes {} and {}",
                labels[p],
                a.shape()[p],
                a.shape()[q]
            ));
        }
        let mut shape = a.shape().to_vec();
        shape.remove(q);
        let d = ndarray::ArrayD::from_shape_fn(ndarray::IxDyn(&shape), |i| {
            let mut full: Vec<usize> = i.as_array_view().to_vec();
            full.insert(q, full[p]);
            a[ndarray::IxDyn(&full)]
        });
        t = Tensor::F32(d);
        labels.remove(q);
    }
    Ok((t, labels))
}

fn pos(l: &[char], c: char) -> i64 {
    l.iter().position(|&x| x == c).map(|p| p as i64).unwrap_or(-1)
}

/// Sums away the labels of `t` not in `keep`, returning the tensor and its remaining labels.
fn sum_out(t: &Tensor, labels: &[char], keep: impl Fn(char) -> bool) -> KernelResult<(Tensor, Vec<char>)> {
    let axes: Vec<i64> = labels
        .iter()
        .enumerate()
        .filter(|(_, &c)| !keep(c))
        .map(|(i, _)| i as i64)
        .collect();
    let rest: Vec<char> = labels.iter().copied().filter(|&c| keep(c)).collect();
    if axes.is_empty() {
        return Ok((t.clone(), rest));
    }
    Ok((reduce(t, &axes, false, Reduce::Sum)?, rest))
}

pub fn einsum(eq: &str, inputs: &[&Tensor]) -> KernelResult<Tensor> {
    let ranks: Vec<usize> = inputs.iter().map(|t| t.shape().len()).collect();
    let (ins, out) = parse(eq, &ranks)?;
    let mut diag = Vec::with_capacity(inputs.len());
    let mut labels = Vec::with_capacity(inputs.len());
    for (k, t) in inputs.iter().enumerate() {
        f32_arg(inputs, k)?;
        if t.shape().len() != ins[k].len() {
            return Err(format!(
                "einsum operand #{k} has rank {}, the equation says {}",
                t.shape().len(),
                ins[k].len()
            ));
        }
        let (d, l) = diagonals(t, &ins[k])?;
        diag.push(d);
        labels.push(l);
    }
    let (ins, inputs): (Vec<Vec<char>>, Vec<&Tensor>) = (labels, diag.iter().collect());
    if inputs.len() > 2 {
        return Err(format!(
            "einsum '{eq}' of {} operands (one or two are supported)",
            inputs.len()
        ));
    }
    if inputs.len() == 1 {
        let (t, labels) = sum_out(inputs[0], &ins[0], |c| out.contains(&c))?;
        let perm: Vec<i64> = out.iter().map(|&c| pos(&labels, c)).collect();
        return transpose(&t, &perm);
    }
    let (a, b) = (&ins[0], &ins[1]);
    let (ta, la) = sum_out(inputs[0], a, |c| out.contains(&c) || b.contains(&c))?;
    let (tb, lb) = sum_out(inputs[1], b, |c| out.contains(&c) || a.contains(&c))?;
    let batch: Vec<char> = la
        .iter()
        .copied()
        .filter(|c| lb.contains(c) && out.contains(c))
        .collect();
    let left: Vec<char> = la.iter().copied().filter(|c| !lb.contains(c)).collect();
    let right: Vec<char> = lb.iter().copied().filter(|c| !la.contains(c)).collect();
    let contr: Vec<char> = la
        .iter()
        .copied()
        .filter(|c| lb.contains(c) && !out.contains(c))
        .collect();
    let size = |t: &Tensor, l: &[char], c: char| t.shape()[pos(l, c) as usize];
    for &c in batch.iter().chain(&contr) {
        if size(&ta, &la, c) != size(&tb, &lb, c) {
            return Err(format!(
                "einsum '{eq}': label '{c}' has sizes {} and {}",
                size(&ta, &la, c),
                size(&tb, &lb, c)
            ));
        }
    }
    let prod = |t: &Tensor, l: &[char], cs: &[char]| cs.iter().map(|&c| size(t, l, c) as i64).product::<i64>();
    let pa: Vec<i64> = batch.iter().chain(&left).chain(&contr).map(|&c| pos(&la, c)).collect();
    let pb: Vec<i64> = batch.iter().chain(&contr).chain(&right).map(|&c| pos(&lb, c)).collect();
    let (nb, nl, nk, nr) = (
        prod(&ta, &la, &batch),
        prod(&ta, &la, &left),
        prod(&ta, &la, &contr),
        prod(&tb, &lb, &right),
    );
    let a3 = reshape(&transpose(&ta, &pa)?, &[nb, nl, nk], false)?;
    let b3 = reshape(&transpose(&tb, &pb)?, &[nb, nk, nr], false)?;
    let (Tensor::F32(a3), Tensor::F32(b3)) = (&a3, &b3) else {
        return Err("einsum takes f32 operands".into());
    };
    let c = Tensor::F32(batch_matmul(a3, b3, false, false)?);
    let mut dims: Vec<i64> = Vec::new();
    let mut labels: Vec<char> = Vec::new();
    for &c in &batch {
        dims.push(size(&ta, &la, c) as i64);
        labels.push(c);
    }
    for &c in &left {
        dims.push(size(&ta, &la, c) as i64);
        labels.push(c);
    }
    for &c in &right {
        dims.push(size(&tb, &lb, c) as i64);
        labels.push(c);
    }
    let c = reshape(&c, &dims, false)?;
    let perm: Vec<i64> = out.iter().map(|&ch| pos(&labels, ch)).collect();
    if perm.iter().any(|&p| p < 0) || perm.len() != labels.len() {
        return Err(format!("einsum '{eq}': output labels do not match the operands"));
    }
    transpose(&c, &perm)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{ArrayD, Dimension, IxDyn};

    fn f(shape: &[usize]) -> Tensor {
        Tensor::F32(ArrayD::from_shape_fn(IxDyn(shape), |i| {
            i.as_array_view()
                .iter()
                .enumerate()
                .map(|(k, &v)| (k + 1) as f32 * v as f32)
                .sum::<f32>()
                * 0.5
                - 1.0
        }))
    }

    #[test]
    fn attention_shaped_equations_match_loops() {
        // "bhqd,bhkd->bhqk" (scores) and "bhqk,bhkd->bqhd" (context)
        let q = f(&[2, 3, 4, 5]);
        let k = f(&[2, 3, 6, 5]);
        let s = einsum("bhqd,bhkd->bhqk", &[&q, &k]).unwrap();
        let (Tensor::F32(qa), Tensor::F32(ka), Tensor::F32(sa)) = (&q, &k, &s) else {
            panic!()
        };
        assert_eq!(sa.shape(), &[2, 3, 4, 6]);
        for (b, h, i, j) in [(0, 0, 0, 0), (1, 2, 3, 5), (1, 0, 2, 1)] {
            let want: f32 = (0..5).map(|d| qa[[b, h, i, d]] * ka[[b, h, j, d]]).sum();
            assert!((sa[[b, h, i, j]] - want).abs() < 1e-4);
        }
        let v = f(&[2, 3, 6, 5]);
        let c = einsum("bhqk,bhkd->bqhd", &[&s, &v]).unwrap();
        assert_eq!(c.shape(), &[2, 4, 3, 5]);
        let t = einsum("ij->ji", &[&f(&[2, 3])]).unwrap();
        assert_eq!(t.shape(), &[3, 2]);
        let r = einsum("ij->i", &[&f(&[2, 3])]).unwrap();
        assert_eq!(r.shape(), &[2]);
        // the diagonal, an implicit output (inner product) and an ellipsis
        let dg = einsum("ii->i", &[&f(&[2, 2])]).unwrap();
        let Tensor::F32(m) = f(&[2, 2]) else { panic!() };
        assert_eq!(dg, Tensor::F32(ndarray::arr1(&[m[[0, 0]], m[[1, 1]]]).into_dyn()));
        let Tensor::F32(ip) = einsum("i,i", &[&f(&[3]), &f(&[3])]).unwrap() else {
            panic!()
        };
        assert_eq!(ip.shape(), &[] as &[usize]);
        assert_eq!(
            einsum("...ij,...jk->...ik", &[&f(&[2, 3, 4]), &f(&[2, 4, 5])])
                .unwrap()
                .shape(),
            &[2, 3, 5]
        );
    }
}
