//! The Gram matrices GPTQ rounds weights with (`params::gptq`): one float run over calibration
//! samples with each quantized layer's activation input watched. Each input becomes the
//! patches its weight rows multiply (`dialects::weight_layout`), and X Xᵀ is summed per
//! group — within a sample in f32 (by the GEMM, or by dot products for a depthwise
//! convolution), across samples in f64 in sample order; a sample with fewer patches than k
//! hands its patches over and the sample-order combine multiplies them once k rows are
//! together. Either way the sums do not depend on the thread count.
//!
//! ```text
//! %y = onnx.Conv(%x, %w) {group = 1, pads = [1, 1, 1, 1]}    w: 16×8×3×3
//!   H += Σ over output pixels p of patch(x, p) patch(x, p)ᵀ   (72×72; patch = (c, i, j))
//! ```

mod depthwise;
mod paired;

pub use paired::{measure_paired_grams, PairedGrams};

use super::QuantizeError;
use crate::dialects::conv_window::ConvPads;
use crate::dialects::weight_layout::{ConvPatches, Patches, WeightLayout};
use crate::interp::kernels::conv_nchw::same_pads;
use crate::interp::kernels::matmul::gemm_strided;
use crate::interp::Program;
use crate::ir::attrs::op_attrs;
use crate::ir::graph::{body_ops, find_function, op_name};
use crate::ir::keys::TensorKeys;
use crate::params::gptq::Gram;
use crate::passes::quantize_weights::weight_site;
use crate::recipe::{QuantConfig, WeightMode};
use crate::run::{run_samples_fold, Feed};
use crate::tensor::Tensor;
use melior::ir::operation::OperationLike;
use melior::ir::Module;
use ndarray::ArrayViewD;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Bytes of f64 sums the measured layers may take together (each sample in flight holds as
/// many again); layers past it keep nearest rounding, and say so.
pub const GRAM_BUDGET: usize = 128 << 20;

/// [`GRAM_BUDGET`] for one wave of side-by-side measurements (`paired`), whose sums are four
/// times as large and kept per cross-validation fold: fer's last 3×3 convolution (k = 1,152)
/// takes 170 MiB.
pub const PAIRED_GRAM_BUDGET: usize = 512 << 20;

/// How many patches each sample contributes to a layer's Gram matrices (per image and group):
/// all of them where that costs at most [`SAMPLE_MACS`] multiply-adds (k² each), else an
/// evenly spread subset of that cost, but never fewer than [`PATCHES_PER_INPUT`] · k over
/// all samples. A 3×3 convolution over 96 channels at 80×80 has 6,400 patches of 864 a
/// sample, 4.8 G multiply-adds in full; on ppocr_det 432 of them per sample (16 · 864 over 32
/// samples) gave the same model SQNR as all of them, while 256 patches a sample of its
/// depthwise convolutions at 160×160 (25,600 of 9 each) cost 1 dB.
pub const SAMPLE_MACS: usize = 1 << 26;

/// Fewest patches per input a row multiplies, over all samples.
pub const PATCHES_PER_INPUT: usize = 16;

/// Patches each sample gives a layer whose patches are `k` long, out of `samples`.
fn patches_per_sample(k: usize, samples: usize) -> usize {
    (SAMPLE_MACS / (k * k))
        .max((PATCHES_PER_INPUT * k).div_ceil(samples))
        .max(1)
}

/// Largest patch length measured: GPTQ's factorisation costs k³, its loop rows · k².
pub const MAX_K: usize = 4096;

/// What [`measure_grams`] measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WeightGrams {
    /// By the compute op's output key (the key `quantize-weights` looks them up by).
    pub grams: BTreeMap<String, Arc<Gram>>,
    pub samples: usize,
    /// Layers left at nearest rounding, with why.
    pub left: Vec<(String, String)>,
}

impl std::fmt::Display for WeightGrams {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "GPTQ: input Gram matrices of {} layers on {} calibration samples",
            self.grams.len(),
            self.samples
        )?;
        write!(f, "{}", crate::text::first_of(&self.left, "left at nearest rounding"))
    }
}

struct Layer {
    out_key: String,
    input: String,
    layout: WeightLayout,
    /// Patches taken from each sample (per image and group).
    per_sample: usize,
    /// The activation input's quantization, for a layer measured side by side (`paired`);
    /// `None` where it stays float.
    input_params: Option<crate::params::QuantParams>,
    /// For a layer measured side by side, its float weight (flat, row-major), shape and
    /// quantization: its map is chosen by the error of its own rows on their grids.
    weights: Option<(Vec<f32>, Vec<usize>, crate::params::QuantParams)>,
}

/// Layers left at nearest rounding: (output key, why).
type LeftLayers = Vec<(String, String)>;

/// The layers whose int8/int4 weight `config` quantizes that can be measured, and the others
/// with why not; with `paired` = (plan, wave), only the layers of that wave, measured on their
/// float and quantized inputs at once (`paired`), which takes patches of 2k and four times
/// the sums, with each input's quantization as the plan says — and whether deeper waves are
/// left.
fn select_layers(
    module: &Module,
    config: &QuantConfig,
    samples: usize,
    paired: Option<(&crate::recipe::plan::Plan, usize)>,
) -> Result<(Vec<Layer>, LeftLayers, bool), QuantizeError> {
    let func = find_function(module, None)?;
    let tensor_keys = TensorKeys::new(func);
    let mut layers: Vec<Layer> = Vec::new();
    let mut left = Vec::new();
    // side by side: patches of 2k, sums of 2k × 2k kept per cross-validation fold
    let (width, copies, total) = match paired {
        Some(_) => (2, 4 * paired::FOLDS, PAIRED_GRAM_BUDGET),
        None => (1, 1, GRAM_BUDGET),
    };
    let mut budget = total;
    let mut deeper = false;
    let mut waves = crate::quantize::waves::Waves::default();
    for op in body_ops(func) {
        let site = weight_site(op, config).filter(|s| matches!(s.res.weights, WeightMode::Int8 | WeightMode::Int4));
        waves.visit(op, &tensor_keys, site.is_some());
        let Some(site) = site else { continue };
        let Some(x) = site.rule.activations.first().and_then(|&i| op.operand(i).ok()) else {
            continue;
        };
        let Some(input) = tensor_keys.get(x).map(str::to_string) else {
            continue;
        };
        let wave = waves.of(&input);
        if let Some((_, only)) = paired {
            deeper |= wave > only;
            if wave != only {
                continue;
            }
        }
        let name = op_name(&op);
        let Some(layout) = WeightLayout::of(&name, &op_attrs(&op), site.values.shape()) else {
            left.push((site.out_key, format!("{name} in this form is not handled")));
            continue;
        };
        let bytes = layout.gram_len() * 8 * copies;
        if layout.k * width > MAX_K {
            left.push((
                site.out_key,
                format!("{} inputs per row (at most {MAX_K})", layout.k * width),
            ));
        } else if bytes > budget {
            left.push((
                site.out_key,
                format!("over the {} MiB budget of Gram matrices", total >> 20),
            ));
        } else {
            let weights = match paired {
                None => None,
                Some(_) => match crate::passes::quantize_weights::weight_params(&site.values, site.axis, &site.res) {
                    Ok((p, _)) => Some((site.values.iter().copied().collect(), site.values.shape().to_vec(), p)),
                    Err(e) => {
                        left.push((site.out_key, e.to_string()));
                        continue;
                    }
                },
            };
            budget -= bytes;
            layers.push(Layer {
                out_key: site.out_key,
                input,
                // the same patches as the plain measurement's, whatever the width
                per_sample: patches_per_sample(layout.k, samples),
                input_params: paired.and_then(|(p, _)| p.params_of(x).cloned()),
                weights,
                layout,
            });
        }
    }
    Ok((layers, left, deeper))
}

/// Adds one sample's partial sums (by layer, in sample order) to the layers' totals.
fn add_sample(totals: &mut [Total], sample: Vec<Option<(Partial, u64)>>) {
    for (t, x) in totals.iter_mut().zip(sample) {
        if let Some((partial, n)) = x {
            t.add(partial, n);
        }
    }
}

/// Measures the Gram matrices of the activation inputs of every layer whose int8/int4 weight
/// `config` quantizes, on the samples of `feed` (inputs of `program`, `module` compiled).
pub fn measure_grams(
    module: &Module,
    program: &Program,
    config: &QuantConfig,
    feed: Feed,
    threads: usize,
) -> Result<WeightGrams, QuantizeError> {
    let failed = |m: String| QuantizeError::Stats(format!("GPTQ: {m}"));
    // a stream's length is not known before the run: take it as 32 samples
    let samples = feed.len().unwrap_or(32).max(1);
    let (layers, left, _) = select_layers(module, config, samples, None)?;
    let mut out = WeightGrams {
        left,
        ..Default::default()
    };
    let (readers, keys) = crate::run::readers(layers.iter().map(|l| l.input.as_str()));
    let watch = program.watch(&keys).map_err(|e| failed(e.to_string()))?;
    let init = || vec![None::<(Partial, u64)>; layers.len()];
    let fold = |s: &mut Vec<Option<(Partial, u64)>>, _: usize, key: &str, t: &Tensor| -> Result<(), String> {
        let Tensor::F32(x) = t else { return Ok(()) };
        for &i in readers.get(key).map_or(&[][..], |v| v.as_slice()) {
            let l = &layers[i];
            if s[i].is_some() {
                return Err(format!("{}: its input was computed twice in one sample", l.out_key));
            }
            s[i] = Some(gram_partial(&x.view(), &l.layout, l.per_sample).map_err(|e| format!("{}: {e}", l.out_key))?);
        }
        Ok(())
    };
    let mut totals: Vec<Total> = layers.iter().map(|l| Total::new(l.layout.k)).collect();
    let mut combine = |_: usize, s: Vec<Option<(Partial, u64)>>| -> Result<(), String> {
        add_sample(&mut totals, s);
        Ok(())
    };
    out.samples = run_samples_fold(program, feed, threads, &watch, &init, &fold, &mut combine, "GPTQ")
        .map_err(|e| failed(e.to_string()))?;
    for (l, t) in layers.into_iter().zip(totals) {
        match t.finish() {
            Some((sums, patches)) if patches > 0 => {
                let mut gram = Gram {
                    groups: l.layout.groups,
                    k: l.layout.k,
                    sums,
                    patches,
                    factors: Vec::new(),
                    targets: Vec::new(),
                };
                // factorised once here, not at every rounding of the layer
                match gram.factorize() {
                    Ok(()) => {
                        out.grams.insert(l.out_key, Arc::new(gram));
                    }
                    Err(e) => out.left.push((l.out_key, e.to_string())),
                }
            }
            _ => out.left.push((l.out_key, "its input was never an f32 value".into())),
        }
    }
    Ok(out)
}

/// A layer's sums over the samples so far, taken in sample order: a sample's [`Partial::Rows`]
/// wait until at least k rows are together, then go through one GEMM — at points that depend
/// on the samples alone, so the sums do not depend on the thread count.
struct Total {
    k: usize,
    sums: Vec<f64>,
    patches: u64,
    rows: Vec<f32>,
    block: Vec<f32>,
}

impl Total {
    fn new(k: usize) -> Total {
        Total {
            k,
            sums: Vec::new(),
            patches: 0,
            rows: Vec::new(),
            block: Vec::new(),
        }
    }

    fn add(&mut self, partial: Partial, n: u64) {
        self.patches += n;
        match partial {
            Partial::Sums(s) if self.sums.is_empty() => self.sums = s,
            Partial::Sums(s) => self.sums.iter_mut().zip(&s).for_each(|(a, b)| *a += b),
            Partial::Rows(r) => {
                self.rows.extend_from_slice(&r);
                if self.rows.len() >= self.k * self.k {
                    self.flush();
                }
            }
        }
    }

    fn flush(&mut self) {
        let k = self.k;
        if self.rows.is_empty() {
            return;
        }
        if self.sums.is_empty() {
            // Rows come from one-group layers only: one k×k block
            self.sums = vec![0f64; k * k];
        }
        add_symmetric(
            &self.rows,
            self.rows.len() / k,
            k,
            false,
            &mut self.sums,
            &mut self.block,
        );
        self.rows.clear();
    }

    /// The sums and the patches counted; None when no sample reached the layer.
    fn finish(mut self) -> Option<(Vec<f64>, u64)> {
        self.flush();
        (!self.sums.is_empty()).then_some((self.sums, self.patches))
    }
}

/// Patches per GEMM call: at most this many f32 values of patches at once.
const CHUNK_VALUES: usize = 1 << 20;

/// Rows and columns of the Gram blocks one GEMM computes: only the blocks on and above the
/// diagonal are computed, and mirrored, which halves the multiply-adds of a large k.
const SYMMETRIC_BLOCK: usize = 128;

/// `take` of `n` positions, evenly spread (all of them when `take` ≥ `n`).
fn spread(n: usize, take: usize) -> impl Iterator<Item = usize> {
    let take = take.min(n);
    (0..take).map(move |i| i * n / take)
}

/// One sample's share of a layer's Gram matrices.
#[derive(Debug, Clone, PartialEq)]
pub enum Partial {
    /// Summed: one k×k block per group.
    Sums(Vec<f64>),
    /// Fewer patches than k (one group): the patches themselves, as rows of k, which take less
    /// room than a k×k block and make a better-shaped GEMM once several samples' are together
    /// (a 3×3 convolution over 128 channels at 4×4: 16 patches of 1,152 a sample).
    Rows(Vec<f32>),
}

/// Adds P Pᵀ of `m` patches `p` of length `k` to `sums` (k×k, row-major): patches as rows
/// (patch r at r·k) or as columns (input t of patch r at t·m + r). Only the blocks on and
/// above the diagonal are multiplied; each one below is its mirror.
fn add_symmetric(p: &[f32], m: usize, k: usize, columns: bool, sums: &mut [f64], block: &mut Vec<f32>) {
    // strides of P as k × m: along an input t, along a patch r
    let (ts, rs) = if columns { (m as isize, 1) } else { (1, k as isize) };
    block.resize(SYMMETRIC_BLOCK * SYMMETRIC_BLOCK, 0.0);
    for bi in (0..k).step_by(SYMMETRIC_BLOCK) {
        let ni = SYMMETRIC_BLOCK.min(k - bi);
        let a = &p[bi * ts as usize..];
        for bj in (bi..k).step_by(SYMMETRIC_BLOCK) {
            let nj = SYMMETRIC_BLOCK.min(k - bj);
            let b = &p[bj * ts as usize..];
            gemm_strided(ni, nj, m, a, ts, rs, b, rs, ts, block);
            for r in 0..ni {
                let row = &block[r * nj..(r + 1) * nj];
                let dst = &mut sums[(bi + r) * k + bj..(bi + r) * k + bj + nj];
                dst.iter_mut().zip(row).for_each(|(s, v)| *s += *v as f64);
                if bi != bj {
                    for (c, v) in row.iter().enumerate() {
                        sums[(bj + c) * k + bi + r] += *v as f64;
                    }
                }
            }
        }
    }
}

/// Adds the Gram matrices of `x`'s patches to `sums` (a layer's `gram_len()` values), at most
/// `take` patches of each image and group, evenly spread; returns the patches counted.
pub fn add_gram(x: &ArrayViewD<f32>, l: &WeightLayout, take: usize, sums: &mut [f64]) -> Result<u64, String> {
    let (partial, n) = gram_partial(x, l, take)?;
    match partial {
        Partial::Sums(s) => sums.iter_mut().zip(&s).for_each(|(a, b)| *a += b),
        Partial::Rows(r) => add_symmetric(&r, r.len() / l.k, l.k, false, sums, &mut Vec::new()),
    }
    Ok(n)
}

/// `x`'s share of the layer's Gram matrices (at most `take` patches of each image and group,
/// evenly spread), and the patches counted.
pub fn gram_partial(x: &ArrayViewD<f32>, l: &WeightLayout, take: usize) -> Result<(Partial, u64), String> {
    let x = x.as_standard_layout();
    let data = x.as_slice().unwrap_or(&[]);
    let k = l.k;
    // a convolution's window over this input, worked out once for the count and the patches
    let conv = match &l.patches {
        Patches::Rows => {
            if x.shape().last() != Some(&k) {
                return Err(format!("an input of shape {:?} for rows of {k}", x.shape()));
            }
            None
        }
        Patches::Conv(c) => Some((c, Geometry::of(x.shape(), l, c)?)),
    };
    let count = match &conv {
        None => (data.len() / k).min(take),
        Some((c, g)) => {
            if c.group_channels == 1 && k <= depthwise::MAX_K && take >= g.oh * g.ow {
                let mut sums = vec![0f64; l.gram_len()];
                depthwise::depthwise_grams(data, g, c, l, &mut sums);
                return Ok((Partial::Sums(sums), (g.n * g.oh * g.ow) as u64));
            }
            g.n * (g.oh * g.ow).min(take)
        }
    };
    let conv = conv.as_ref().map(|(c, g)| (*c, g));
    if l.groups == 1 && count < k {
        // rows: patch r's inputs at r·k
        let mut rows = Vec::with_capacity(count * k);
        let mut keep = |p: &[f32], m: usize, _: usize, columns: bool| {
            if columns {
                rows.extend((0..m * k).map(|i| p[(i % k) * m + i / k]));
            } else {
                rows.extend_from_slice(&p[..m * k]);
            }
        };
        let n = patches(data, conv, l, take, &mut keep)?;
        return Ok((Partial::Rows(rows), n));
    }
    let mut sums = vec![0f64; l.gram_len()];
    let mut block = Vec::new();
    let mut add = |p: &[f32], m: usize, group: usize, columns: bool| {
        add_symmetric(
            p,
            m,
            k,
            columns,
            &mut sums[group * k * k..(group + 1) * k * k],
            &mut block,
        );
    };
    let n = patches(data, conv, l, take, &mut add)?;
    Ok((Partial::Sums(sums), n))
}

/// Takes `m` patches (as rows, or as columns when the flag says so) of group `g`.
type TakePatches<'a> = dyn FnMut(&[f32], usize, usize, bool) + 'a;

/// Hands the patches of `data` to `take_patches` in chunks, at most `take` of each image and
/// group: its rows, or the patches of the convolution `conv` over it; returns the patches
/// handed.
fn patches(
    data: &[f32],
    conv: Option<(&ConvPatches, &Geometry)>,
    l: &WeightLayout,
    take: usize,
    take_patches: &mut TakePatches,
) -> Result<u64, String> {
    let k = l.k;
    match conv {
        None => {
            let rows = data.len() / k;
            let chunk = (CHUNK_VALUES / k).max(1);
            if rows <= take {
                for start in (0..rows).step_by(chunk) {
                    let n = chunk.min(rows - start);
                    take_patches(&data[start * k..(start + n) * k], n, 0, false);
                }
                return Ok(rows as u64);
            }
            let picked: Vec<usize> = spread(rows, take).collect();
            let mut p = vec![0f32; chunk.min(take) * k];
            for part in picked.chunks(chunk) {
                for (r, &i) in part.iter().enumerate() {
                    p[r * k..(r + 1) * k].copy_from_slice(&data[i * k..(i + 1) * k]);
                }
                take_patches(&p[..part.len() * k], part.len(), 0, false);
            }
            Ok(picked.len() as u64)
        }
        Some((c, g)) => conv_patches(g, data, l, c, take, take_patches),
    }
}

/// A convolution's input and output sizes, as [N, C, H, W] or [N, H, W, C] (a 1-D input [N,
/// C, L] as H = 1), and its leading pads.
struct Geometry {
    n: usize,
    ch: usize,
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    pt: usize,
    pl: usize,
}

impl Geometry {
    fn of(shape: &[usize], l: &WeightLayout, c: &ConvPatches) -> Result<Geometry, String> {
        let (n, ch, h, w) = match (c.channels_last, c.one_d, shape) {
            (false, true, &[n, ch, len]) => (n, ch, 1, len),
            (false, false, &[n, ch, h, w]) => (n, ch, h, w),
            (true, false, &[n, h, w, ch]) => (n, ch, h, w),
            _ => return Err(format!("an input of shape {shape:?} for this convolution")),
        };
        if ch != l.groups * c.group_channels {
            return Err(format!(
                "{ch} input channels for {} groups of {}",
                l.groups, c.group_channels
            ));
        }
        let axis = |len: usize, a: usize| -> Result<(usize, usize), String> {
            let (k, s, d) = (c.kernel[a], c.strides[a], c.dilations[a]);
            let (before, after) = match c.pads {
                ConvPads::Explicit(p) => p[a],
                ConvPads::Same { upper } => same_pads(len, k, s, d, upper),
            };
            let eff = (k - 1) * d + 1;
            let padded = len + before + after;
            if padded < eff {
                return Err(format!("a spatial size of {len} for a window of {eff}"));
            }
            Ok(((padded - eff) / s + 1, before))
        };
        let (oh, pt) = axis(h, 0)?;
        let (ow, pl) = axis(w, 1)?;
        Ok(Geometry {
            n,
            ch,
            h,
            w,
            oh,
            ow,
            pt,
            pl,
        })
    }
}

/// The patches of a convolution's input, group by group, handed to `take_patches` in chunks:
/// as columns for a channels-first input (each input of the patch a run along one channel's
/// plane), as rows for a channels-last one (each tap a run of channels).
fn conv_patches(
    g: &Geometry,
    data: &[f32],
    l: &WeightLayout,
    c: &ConvPatches,
    take: usize,
    take_patches: &mut TakePatches,
) -> Result<u64, String> {
    let Geometry {
        n,
        ch,
        h,
        w,
        oh,
        ow,
        pt,
        pl,
    } = *g;
    let positions = oh * ow;
    let k = l.k;
    let gc = c.group_channels;
    let [kh, kw] = c.kernel;
    // a 1×1 convolution at stride 1 over every position: the patches are the input itself
    let plain = kh * kw == 1 && c.strides == [1, 1] && (pt, pl) == (0, 0) && (oh, ow) == (h, w);
    if plain && !c.channels_last && take >= positions {
        let plane = h * w;
        let chunk = (CHUNK_VALUES / k).max(1);
        for img in 0..n {
            for grp in 0..l.groups {
                let base = (img * ch + grp * gc) * plane;
                for start in (0..plane).step_by(chunk) {
                    let m = chunk.min(plane - start);
                    // the group's channels as k rows of the plane: columns `start..start + m`
                    let mut p = Vec::with_capacity(k * m);
                    for cc in 0..gc {
                        p.extend_from_slice(&data[base + cc * plane + start..base + cc * plane + start + m]);
                    }
                    take_patches(&p, m, grp, true);
                }
            }
        }
        return Ok((n * positions) as u64);
    }
    let picked: Vec<usize> = spread(positions, take).collect();
    let chunk = (CHUNK_VALUES / k).max(1).min(picked.len()).max(1);
    let mut p = vec![0f32; chunk * k];
    // each picked position's top-left input row and column (negative in the padding)
    let origin: Vec<(isize, isize)> = picked
        .iter()
        .map(|&pos| {
            let (oy, ox) = (pos / ow, pos % ow);
            (
                (oy * c.strides[0]) as isize - pt as isize,
                (ox * c.strides[1]) as isize - pl as isize,
            )
        })
        .collect();
    let (dh, dw) = (c.dilations[0] as isize, c.dilations[1] as isize);
    // the input row and column of tap (i, j) from `origin`, or None in the padding
    let tap = |(y0, x0): (isize, isize), i: usize, j: usize| -> Option<(usize, usize)> {
        let (y, xx) = (y0 + i as isize * dh, x0 + j as isize * dw);
        (y >= 0 && xx >= 0 && (y as usize) < h && (xx as usize) < w).then_some((y as usize, xx as usize))
    };
    for img in 0..n {
        for grp in 0..l.groups {
            for part in origin.chunks(chunk) {
                let m = part.len();
                if c.channels_last {
                    // rows: patch r holds (i, j, c) at ((i·kw + j)·gc + c)
                    for (r, &pos) in part.iter().enumerate() {
                        for i in 0..kh {
                            for j in 0..kw {
                                let dst = &mut p[r * k + (i * kw + j) * gc..r * k + (i * kw + j + 1) * gc];
                                match tap(pos, i, j) {
                                    Some((y, xx)) => {
                                        let src = ((img * h + y) * w + xx) * ch + grp * gc;
                                        dst.copy_from_slice(&data[src..src + gc]);
                                    }
                                    None => dst.fill(0.0),
                                }
                            }
                        }
                    }
                    take_patches(&p[..m * k], m, grp, false);
                } else {
                    // columns: input (c, i, j) of every patch in a run of m
                    for cc in 0..gc {
                        let plane = &data[(img * ch + grp * gc + cc) * h * w..(img * ch + grp * gc + cc + 1) * h * w];
                        for i in 0..kh {
                            for j in 0..kw {
                                let t = (cc * kh + i) * kw + j;
                                let dst = &mut p[t * m..(t + 1) * m];
                                for (d, &pos) in dst.iter_mut().zip(part) {
                                    *d = tap(pos, i, j).map_or(0.0, |(y, xx)| plane[y * w + xx]);
                                }
                            }
                        }
                    }
                    take_patches(&p[..m * k], m, grp, true);
                }
            }
        }
    }
    Ok((n * picked.len()) as u64)
}
