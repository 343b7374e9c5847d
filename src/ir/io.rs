//! Reading and writing modules: text or bytecode, diagnostics turned into errors, atomic writes.

use super::IrError;
use crate::fsutil::write_atomic;
use melior::ir::operation::{OperationLike, OperationPrintingFlags};
use melior::ir::Module;
use melior::Context;
use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;

const BYTECODE_MAGIC: &[u8] = b"ML\xEFR";

/// The two serialisations of an MLIR module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModuleFormat {
    Text,
    Bytecode,
}

impl ModuleFormat {
    /// The format a file name asks for: `.mlirbc` is bytecode, `.mlir` is text.
    pub fn from_path(path: &Path) -> Option<Self> {
        match path.extension().and_then(|e| e.to_str()) {
            Some("mlir") => Some(ModuleFormat::Text),
            Some("mlirbc") => Some(ModuleFormat::Bytecode),
            _ => None,
        }
    }

    /// The format of a buffer, by its content.
    pub fn detect(bytes: &[u8]) -> Self {
        if bytes.starts_with(BYTECODE_MAGIC) {
            ModuleFormat::Bytecode
        } else {
            ModuleFormat::Text
        }
    }
}

/// Renders one diagnostic as `file:line:col: severity: message`, with its notes indented.
fn render(d: &melior::diagnostic::Diagnostic) -> String {
    let loc = d.location();
    let pos = if loc.is_file_line_col_range() {
        let file = crate::ir::ref_str(loc.file_line_col_range_filename().as_string_ref())
            .unwrap_or("?")
            .to_string();
        format!(
            "{file}:{}:{}",
            loc.file_line_col_range_start_line(),
            loc.file_line_col_range_start_column()
        )
    } else {
        loc.to_string()
    };
    let sev = match d.severity() {
        melior::diagnostic::DiagnosticSeverity::Error => "error",
        melior::diagnostic::DiagnosticSeverity::Warning => "warning",
        melior::diagnostic::DiagnosticSeverity::Note => "note",
        melior::diagnostic::DiagnosticSeverity::Remark => "remark",
    };
    let mut s = format!("{pos}: {sev}: {d}");
    for i in 0..d.note_count() {
        if let Ok(n) = d.note(i) {
            s.push_str(&format!(" (note: {n})"));
        }
    }
    s
}

/// Runs `f` with a diagnostic handler attached and returns what it produced plus every
/// diagnostic MLIR emitted meanwhile (instead of printing them on stderr).
pub(crate) fn capture_diagnostics<T>(ctx: &Context, f: impl FnOnce() -> T) -> (T, Vec<String>) {
    let diags = Rc::new(RefCell::new(Vec::<String>::new()));
    let sink = diags.clone();
    let id = ctx.attach_diagnostic_handler(move |d| {
        sink.borrow_mut().push(render(&d));
        true
    });
    let out = f();
    ctx.detach_diagnostic_handler(id);
    let v = diags.borrow().clone();
    (out, v)
}

/// Parses a module from bytes (text or bytecode, detected by content). `name` is what
/// diagnostics call the buffer.
pub fn load_bytes<'c>(ctx: &'c Context, bytes: &[u8], name: &Path) -> Result<Module<'c>, IrError> {
    // MLIR's parser takes a (pointer, length) pair, so non-UTF-8 bytes and interior NULs reach it
    // as they are and come back as diagnostics rather than panics.
    let (module, diagnostics) = capture_diagnostics(ctx, || unsafe {
        let src = mlir_sys::MlirStringRef {
            data: bytes.as_ptr() as *const _,
            length: bytes.len(),
        };
        Module::from_option_raw(mlir_sys::mlirModuleCreateParse(ctx.to_raw(), src))
    });
    module.ok_or_else(|| IrError::Parse {
        path: name.to_path_buf(),
        diagnostics: diagnostics.into_iter().map(|d| d.replacen("-:", "", 1)).collect(),
    })
}

/// Loads a `.mlir` (text) or `.mlirbc` (bytecode) file; the format is detected by content.
/// Parsing goes through the file so that locations carry its real name, and every parse or
/// verifier diagnostic is returned as `file:line:col: message`.
pub fn load<'c>(ctx: &'c Context, path: &Path) -> Result<Module<'c>, IrError> {
    let read_err = |source| IrError::Read {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read_err)?;
    if meta.is_dir() {
        return Err(read_err(std::io::Error::other(
            "is a directory, expected an .mlir or .mlirbc file",
        )));
    }
    // Read ourselves first: a missing or unreadable file is an I/O error, not a parse error.
    let bytes = std::fs::read(path).map_err(read_err)?;
    let Some(path_str) = path.to_str() else {
        return load_bytes(ctx, &bytes, path);
    };
    let (module, diagnostics) = capture_diagnostics(ctx, || unsafe {
        let p = mlir_sys::MlirStringRef {
            data: path_str.as_ptr() as *const _,
            length: path_str.len(),
        };
        Module::from_option_raw(mlir_sys::mlirModuleCreateParseFromFile(ctx.to_raw(), p))
    });
    module.ok_or_else(|| IrError::Parse {
        path: path.to_path_buf(),
        diagnostics,
    })
}

/// The module printed as text, in MLIR's custom form with locations, so that name locations
/// (and with them tensor keys) survive a text round trip as they survive bytecode.
pub fn print_module(module: &Module) -> String {
    let flags = OperationPrintingFlags::new().enable_debug_info(true, false);
    module
        .as_operation()
        .to_string_with_flags(flags)
        .unwrap_or_else(|_| module.as_operation().to_string())
}

/// Streams the generic printed form of `module` (no locations) to `sink` in chunks, without
/// building the text: a hash of a large model then needs no copy of it in memory.
pub fn print_module_generic_to(module: &Module, sink: &mut dyn FnMut(&[u8])) {
    unsafe extern "C" fn forward(s: mlir_sys::MlirStringRef, data: *mut std::ffi::c_void) {
        let sink = unsafe { &mut *(data as *mut &mut dyn FnMut(&[u8])) };
        if s.length > 0 && !s.data.is_null() {
            sink(unsafe { std::slice::from_raw_parts(s.data as *const u8, s.length) });
        }
    }
    let mut sink = sink;
    unsafe {
        let flags = mlir_sys::mlirOpPrintingFlagsCreate();
        mlir_sys::mlirOpPrintingFlagsPrintGenericOpForm(flags);
        mlir_sys::mlirOperationPrintWithFlags(
            module.as_operation().to_raw(),
            flags,
            Some(forward),
            &mut sink as *mut &mut dyn FnMut(&[u8]) as *mut _,
        );
        mlir_sys::mlirOpPrintingFlagsDestroy(flags);
    }
}

/// The bytes of `module` in `format`.
pub fn write_module(module: &Module, format: ModuleFormat) -> Vec<u8> {
    match format {
        ModuleFormat::Text => print_module(module).into_bytes(),
        ModuleFormat::Bytecode => module.as_operation().write_bytecode(),
    }
}

/// Writes `module` to `path` (text for `.mlir`, bytecode for `.mlirbc`) atomically, refusing to
/// write over any of `inputs`.
pub fn save(module: &Module, path: &Path, inputs: &[&Path]) -> Result<(), IrError> {
    let format = ModuleFormat::from_path(path).ok_or_else(|| IrError::UnknownFormat {
        path: path.to_path_buf(),
    })?;
    let bytes = write_module(module, format);
    write_atomic(path, &bytes, inputs)?;
    Ok(())
}

/// Runs MLIR's verifier on the module; the error carries every diagnostic it emitted.
pub fn verify(module: &Module) -> Result<(), String> {
    let ctx = module.context();
    let ctx = unsafe { ctx.to_ref() };
    let (ok, diags) = capture_diagnostics(ctx, || module.as_operation().verify());
    if ok {
        Ok(())
    } else {
        Err(if diags.is_empty() {
            "verification failed".into()
        } else {
            diags.join("; ")
        })
    }
}

/// A stable identity of a (prepared) module: FNV-1a 64 of its generic printed form (no
/// locations), as 16 hex digits.
pub fn model_hash(module: &Module) -> String {
    let mut h = crate::hash::Fnv::default();
    print_module_generic_to(module, &mut |chunk| {
        h.bytes(chunk);
    });
    h.hex()
}
