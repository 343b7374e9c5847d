//! Models in any format quantir reads: `.mlir` / `.mlirbc` through [`crate::ir`], `.onnx`
//! through [`super::onnx`], SavedModel directories through [`super::savedmodel`]. The format
//! is chosen by extension, else by content.

use super::{onnx, savedmodel};
use crate::formats::FormatError;
use crate::ir;
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

/// Loads a model file (or SavedModel directory, its default signature) into an MLIR module.
pub fn load<'c>(ctx: &'c Context, path: &Path) -> Result<Module<'c>, FormatError> {
    load_signature(ctx, path, None)
}

/// Loads a model; `signature` chooses the signature of a SavedModel directory (and is an
/// error for the other formats, which have one function).
pub fn load_signature<'c>(ctx: &'c Context, path: &Path, signature: Option<&str>) -> Result<Module<'c>, FormatError> {
    if savedmodel::is_saved_model(path) {
        return savedmodel::load(ctx, path, signature);
    }
    if path.join("saved_model.pbtxt").is_file() {
        return Err(FormatError::SavedModel {
            path: path.join("saved_model.pbtxt"),
            reason: "a text-format SavedModel; quantir reads the binary saved_model.pb \
                     (tf.saved_model.save writes it)"
                .into(),
        });
    }
    if let Some(s) = signature {
        return Err(FormatError::Invalid(format!(
            "{}: --signature {s} applies to SavedModel directories only",
            path.display()
        )));
    }
    match ModelFormat::from_path(path) {
        Some(ModelFormat::Onnx) => onnx::load(ctx, path),
        Some(ModelFormat::Mlir) => Ok(ir::load(ctx, path)?),
        None => {
            // sniff the first byte only: each loader then reads the file once
            let mut head = [0u8; 1];
            let n = std::fs::File::open(path)
                .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
                .map_err(|source| FormatError::Read {
                    path: path.to_path_buf(),
                    source,
                })?;
            if onnx::looks_like_onnx(&head[..n]) {
                onnx::load(ctx, path)
            } else {
                Ok(ir::load(ctx, path)?)
            }
        }
    }
}

/// Refuses an output path whose extension names no model format, before any work is done.
pub fn check_output(path: &Path) -> Result<(), FormatError> {
    match ModelFormat::from_path(path) {
        Some(_) => Ok(()),
        None => Err(FormatError::UnknownOutput {
            path: path.to_path_buf(),
        }),
    }
}

/// True when the model at `path` is (or will be written as) ONNX.
pub fn is_onnx(path: &Path) -> bool {
    ModelFormat::from_path(path) == Some(ModelFormat::Onnx)
}

/// Writes `module` atomically in the format `path` names (`.onnx`, `.mlir`, `.mlirbc`),
/// never over any of `inputs`.
pub fn save(module: &Module, path: &Path, inputs: &[&Path]) -> Result<(), FormatError> {
    match ModelFormat::from_path(path) {
        Some(ModelFormat::Onnx) => onnx::save(module, path, inputs),
        Some(ModelFormat::Mlir) => Ok(ir::save(module, path, inputs)?),
        None => Err(FormatError::UnknownOutput {
            path: path.to_path_buf(),
        }),
    }
}
