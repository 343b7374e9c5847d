//! quantir: post-training quantization on MLIR.
//!
//! The module stays MLIR from load to save; every stage is a library call:
//! [`ir`] (load/save, constants, keys), [`inspect`], [`passes`] (the rewriter), [`params`]
//! (scales and zero points), and the `quantir-calibration` crate (statistics).

pub mod dialects;
pub mod evaluate;
pub mod formats;
pub mod fsutil;
pub mod hash;
pub mod inspect;
pub mod interp;
pub mod ir;
pub mod params;
pub mod passes;
pub mod quantize;
pub mod recipe;
pub mod report;
pub mod run;
pub mod stats_io;
pub mod tensor;

pub use quantir_calibration as calibration;
