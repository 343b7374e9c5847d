//! Models in any format quantir reads: `.mlir` / `.mlirbc` through [`crate::ir`], `.onnx`
//! through [`super::onnx`]. The format is chosen by extension, else by content.

use super::onnx;
use crate::ir::{self, IrError};
use melior::ir::Module;
use melior::Context;
use std::path::Path;

/// The serialisations of a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelFormat {
    Mlir,
    Onnx,
}

impl ModelFormat {
    /// The format a path names by its extension.
    pub fn from_path(path: &Path) -> Option<Self> {
        match path.extension().and_then(|e| e.to_str()) {
            Some("mlir" | "mlirbc") => Some(ModelFormat::Mlir),
            Some("onnx") => Some(ModelFormat::Onnx),
            _ => None,
        }
    }
}

/// Loads a model file into an MLIR module.
pub fn load<'c>(ctx: &'c Context, path: &Path) -> Result<Module<'c>, IrError> {
    if path.join("saved_model.pb").is_file() {
        return Err(IrError::Invalid(format!(
            "{}: a TensorFlow SavedModel directory; quantir does not import SavedModels yet (export it to \
             .mlir with TensorFlow, or to .onnx with tf2onnx)",
            path.display()
        )));
    }
    match ModelFormat::from_path(path) {
        Some(ModelFormat::Onnx) => onnx::load(ctx, path),
        Some(ModelFormat::Mlir) => ir::load(ctx, path),
        None => {
            // sniff the first byte only: each loader then reads the file once
            let mut head = [0u8; 1];
            let n = std::fs::File::open(path)
                .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
                .map_err(|source| IrError::Read {
                    path: path.to_path_buf(),
                    source,
                })?;
            if onnx::looks_like_onnx(&head[..n]) {
                onnx::load(ctx, path)
            } else {
                ir::load(ctx, path)
            }
        }
    }
}

/// True when the model at `path` is (or will be written as) ONNX.
pub fn is_onnx(path: &Path) -> bool {
    ModelFormat::from_path(path) == Some(ModelFormat::Onnx)
}

/// Writes `module` atomically in the format `path` names (`.onnx`, `.mlir`, `.mlirbc`),
/// never over any of `inputs`.
pub fn save(module: &Module, path: &Path, inputs: &[&Path]) -> Result<(), IrError> {
    match ModelFormat::from_path(path) {
        Some(ModelFormat::Onnx) => onnx::save(module, path, inputs),
        _ => ir::save(module, path, inputs),
    }
}
