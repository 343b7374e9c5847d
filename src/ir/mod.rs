//! The MLIR layer: the only part of quantir that talks to melior / mlir-sys.
//!
//! - [`context`]: one `Context` factory (all upstream dialects, unregistered dialects allowed);
//! - [`io`]: [`load`] text or bytecode with every diagnostic as `file:line:col: message`,
//!   [`save`] text or bytecode atomically;
//! - [`constants`]: `DenseElementsAttr` / `dense_resource` ⇄ [`Tensor`](crate::tensor::Tensor);
//! - [`blobs`]: `dense_resource` constants over a mapped file (ONNX external data), not copied;
//! - [`graph`]: functions, ops, uses of a value, insertion, operand rewiring, cloning, safe erasure;
//! - [`keys`]: stable tensor keys (name location, else `@func/op#i:result#j`);
//! - [`types`]: tensor types ⇄ element type and shape.

pub mod attrs;
pub mod blobs;
pub mod constants;
pub mod context;
pub mod fatal;
pub mod graph;
pub mod identity;
pub mod io;
pub mod keys;
pub mod ops;
pub mod quant;
pub mod types;

pub use constants::{attribute_to_tensor, tensor_to_attribute};
pub use context::new_context;
pub use io::{load, load_bytes, print_module, save, write_module, ModuleFormat};
pub use keys::{value_key, TensorKeys};

/// The text of an MLIR string reference. melior's `StringRef::as_str` indexes the last byte,
/// so it panics on an empty string (an empty attribute name or location name in a damaged
/// file): every conversion goes through here.
pub fn ref_str(r: melior::StringRef<'_>) -> Result<&str, std::str::Utf8Error> {
    if r.to_raw().length == 0 {
        return Ok("");
    }
    r.as_str()
}

/// What an MLIR C `print` function writes, as text, with bytes that are not UTF-8 replaced by
/// U+FFFD. melior's `Display` impls fail on such bytes and `to_string()` then panics; a damaged
/// file's names and messages can hold any byte.
pub(crate) fn print_lossy(print: impl FnOnce(mlir_sys::MlirStringCallback, *mut std::ffi::c_void)) -> String {
    unsafe extern "C" fn append(s: mlir_sys::MlirStringRef, buf: *mut std::ffi::c_void) {
        if s.length > 0 {
            // SAFETY: MLIR passes `length` readable bytes; `buf` is the Vec below
            let bytes = unsafe { std::slice::from_raw_parts(s.data as *const u8, s.length) };
            unsafe { &mut *(buf as *mut Vec<u8>) }.extend_from_slice(bytes);
        }
    }
    let mut buf = Vec::<u8>::new();
    print(Some(append), &mut buf as *mut Vec<u8> as *mut std::ffi::c_void);
    String::from_utf8_lossy(&buf).into_owned()
}

/// A location as MLIR prints it (`loc("name")`, `"file":1:2`, …), never failing.
pub fn location_text(loc: melior::ir::Location) -> String {
    print_lossy(|cb, data| unsafe { mlir_sys::mlirLocationPrint(loc.to_raw(), cb, data) })
}

/// A type as MLIR prints it (`tensor<1x3xf32>`), never failing.
pub fn type_text(t: melior::ir::Type) -> String {
    use melior::ir::TypeLike;
    print_lossy(|cb, data| unsafe { mlir_sys::mlirTypePrint(t.to_raw(), cb, data) })
}

use std::path::PathBuf;

/// Errors of the MLIR layer. Each names the file or the tensor it is about.
#[derive(Debug, thiserror::Error)]
pub enum IrError {
    #[error("{path}: cannot read: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{}", format_parse_error(path, diagnostics))]
    Parse { path: PathBuf, diagnostics: Vec<String> },
    #[error(transparent)]
    Write(#[from] crate::fsutil::WriteError),
    #[error("{path}: unknown output format (expected a .mlir or .mlirbc file name)")]
    UnknownFormat { path: PathBuf },
    #[error("constant {what}: {reason}")]
    Constant { what: String, reason: String },
    #[error("cannot erase {op}: its result #{result} still has {uses} use(s)")]
    EraseWithUses { op: String, result: usize, uses: usize },
    #[error("{0}")]
    Invalid(String),
}

fn format_parse_error(path: &std::path::Path, diags: &[String]) -> String {
    match diags.split_first() {
        None => format!("{}: not a valid MLIR module", path.display()),
        Some((first, [])) => format!("{}: invalid MLIR: {first}", path.display()),
        Some((first, rest)) => {
            format!("{}: invalid MLIR: {first}\n{}", path.display(), rest.join("\n"))
        }
    }
}
