//! Formats at the edges: models (`.mlir`/`.mlirbc`, `.onnx`) and sample data (`.npz`,
//! folders of `.npy`, image folders).

pub mod data;
pub mod images;
pub mod model;
pub mod npy_stream;
pub mod onnx;
pub mod savedmodel;

use std::path::PathBuf;

/// Errors of the model formats: a file that cannot be imported or a module that cannot be
/// exported, each naming the file; the MLIR layer's own errors pass through.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error(transparent)]
    Ir(#[from] crate::ir::IrError),
    /// An ONNX file that cannot be imported or a module that cannot be exported to ONNX.
    #[error("{}: {reason}", path.display())]
    Onnx { path: PathBuf, reason: String },
    /// A SavedModel directory that cannot be imported.
    #[error("{}: {reason}", path.display())]
    SavedModel { path: PathBuf, reason: String },
    #[error("{path}: cannot read: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: unknown output format (expected a .mlir, .mlirbc or .onnx file name)")]
    UnknownOutput { path: PathBuf },
    #[error("{0}")]
    Invalid(String),
}
