//! quantir: post-training quantization on MLIR.
//!
//! The module stays MLIR from load to save; every stage is a library call. The modules, from
//! the bottom layer up (a module imports only its own layer and those below; `tests/layers.rs`
//! checks it, and that no file imports in a cycle):
//!
//! | layer | modules | what they hold |
//! |---|---|---|
//! | base | [`tensor`], [`fsutil`], [`hash`], [`text`], [`alloc`] | tensors of every dtype, atomic writes, FNV-1a, message text, the cache-line-aligning allocator |
//! | math | [`params`] | scales and zero points in the mlir / onnx / torch schemes, int32 bias, kernels |
//! | MLIR | [`ir`] | the only code that calls mlir-sys or uses `unsafe` on MLIR handles: context, load/save, constants, types, graph edits, op helpers, tensor keys |
//! | tables | [`dialects`] | what each op is for quantization (TF, ONNX), ONNX data types |
//! | settings | [`recipe`] | `QuantConfig`, recipe files with overrides, the quantization plan |
//! | execution | [`interp`] | the interpreter: shared kernels, one dispatch table per dialect, type inference by running it |
//! | rewriter | [`passes`] | the pass registry (name, summary, scope, needs), one pass per file, typed reports, `PassError` |
//! | formats | [`formats`] | ONNX and SavedModel import/export, sample data (`.npz`, `.npy`, images) |
//! | tools | [`inspect`], [`run`], [`stats_io`] | what a module holds, running samples, statistics files |
//! | pipeline | [`quantize`] | prepare, calibrate (with its cache), quantize, the summary |
//! | results | [`evaluate`], [`report`], [`target`] | float vs quantized, layer by layer; the HTML page; the precision search of `--target-sqnr` |
//! | jobs | [`jobs`] | the front ends' jobs (CLI, Python): settings from flags, calibration from files, arrays or streams, quantize |
//!
//! The statistics observers are the `quantir-calibration` crate, re-exported as
//! [`calibration`] (ndarray and serde only, no MLIR).

pub mod alloc;
pub mod dialects;
pub mod evaluate;
pub mod formats;
pub mod fsutil;
pub mod fuzzing;
pub mod hash;
pub mod inspect;
pub mod interp;
pub mod ir;
pub mod jobs;
pub mod params;
pub mod passes;
pub mod precision;
pub mod quantize;
pub mod recipe;
pub mod report;
pub mod run;
pub mod stats_io;
pub mod target;
pub mod tensor;
pub mod text;

pub use quantir_calibration as calibration;
