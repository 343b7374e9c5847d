//! Reading and writing modules: text or bytecode, diagnostics turned into errors, atomic writes.

use super::IrError;
use crate::fsutil::write_atomic;
use melior::ir::operation::{OperationLike, OperationPrintingFlags};
use melior::ir::Module;
use melior::Context;
use mlir_sys::MlirDiagnostic;
use std::ffi::c_void;
use std::path::Path;

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

/// Renders one diagnostic as `file:line:col: severity: message`, with its notes appended.
/// Printed through the C API into bytes (see [`super::print_lossy`]): a damaged file's names
/// reach messages byte for byte, and this runs inside MLIR's callback, where a panic aborts.
fn render(d: MlirDiagnostic) -> String {
    // SAFETY: `d` is live for the duration of the handler call that passes it here
    let loc = unsafe { melior::ir::Location::from_raw(mlir_sys::mlirDiagnosticGetLocation(d)) };
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
        super::location_text(loc)
    };
    let sev = match unsafe { mlir_sys::mlirDiagnosticGetSeverity(d) } {
        mlir_sys::MlirDiagnosticSeverity_MlirDiagnosticError => "error",
        mlir_sys::MlirDiagnosticSeverity_MlirDiagnosticWarning => "warning",
        mlir_sys::MlirDiagnosticSeverity_MlirDiagnosticNote => "note",
        _ => "remark",
    };
    let message = |d| super::print_lossy(|cb, data| unsafe { mlir_sys::mlirDiagnosticPrint(d, cb, data) });
    let mut s = format!("{pos}: {sev}: {}", message(d));
    for i in 0..unsafe { mlir_sys::mlirDiagnosticGetNumNotes(d) } {
        s.push_str(&format!(
            " (note: {})",
            message(unsafe { mlir_sys::mlirDiagnosticGetNote(d, i) })
        ));
    }
    s
}

/// Runs `f` with a diagnostic handler attached and returns what it produced plus every
/// diagnostic MLIR emitted meanwhile (instead of printing them on stderr).
///
/// The handler is attached through the C API, not melior's `attach_diagnostic_handler`, whose
/// `Diagnostic` prints through `Display`: that fails on bytes that are not UTF-8, and
/// `to_string()` then panics inside the callback — an abort on a damaged `.mlirbc`.
pub(crate) fn capture_diagnostics<T>(ctx: &Context, f: impl FnOnce() -> T) -> (T, Vec<String>) {
    unsafe extern "C" fn handle(d: MlirDiagnostic, sink: *mut c_void) -> mlir_sys::MlirLogicalResult {
        // SAFETY: `sink` is the `Vec` boxed below, alive until the handler is detached
        unsafe { &mut *(sink as *mut Vec<String>) }.push(render(d));
        mlir_sys::MlirLogicalResult { value: 1 }
    }
    /// Detaches the handler however `f` ends, before the buffer it writes to goes.
    struct Attached<'a>(&'a Context, mlir_sys::MlirDiagnosticHandlerID);
    impl Drop for Attached<'_> {
        fn drop(&mut self) {
            unsafe { mlir_sys::mlirContextDetachDiagnosticHandler(self.0.to_raw(), self.1) }
        }
    }
    let mut diags: Box<Vec<String>> = Box::default();
    let sink = &mut *diags as *mut Vec<String> as *mut c_void;
    let out = {
        // SAFETY: the buffer outlives the attachment (`Attached` drops first)
        let id = unsafe { mlir_sys::mlirContextAttachDiagnosticHandler(ctx.to_raw(), Some(handle), sink, None) };
        let _attached = Attached(ctx, id);
        f()
    };
    (out, *diags)
}

/// Deepest bracket nesting (`(`, `[`, `{`, `<` together) a text module may have. MLIR's text
/// parser recurses once per level and overflows an 8 MB stack near 10,000 (nested regions,
/// `"a.b"() ({ ... })`, a 2 MB thread's near 2,500) — a crash no error can be made of.
/// Real models nest a few dozen deep.
pub const MAX_TEXT_NESTING: usize = 1000;

/// Where MLIR text first nests deeper than [`MAX_TEXT_NESTING`], as (line, column), 1-based.
/// String literals and `//` comments are skipped and `->` is not a closing bracket; any other
/// stray `>` only lowers the count, so a real module is never refused.
fn too_deep(text: &[u8]) -> Option<(usize, usize)> {
    let (mut depth, mut line, mut line_start, mut i) = (0usize, 1usize, 0usize, 0usize);
    while i < text.len() {
        match text[i] {
            b'\n' => {
                line += 1;
                line_start = i + 1;
            }
            b'"' => {
                i += 1;
                while i < text.len() && text[i] != b'"' {
                    if text[i] == b'\\' {
                        i += 1;
                    } else if text[i] == b'\n' {
                        line += 1;
                        line_start = i + 1;
                    }
                    i += 1;
                }
            }
            b'/' if text.get(i + 1) == Some(&b'/') => {
                while i + 1 < text.len() && text[i + 1] != b'\n' {
                    i += 1;
                }
            }
            b'-' if text.get(i + 1) == Some(&b'>') => i += 1,
            b'(' | b'[' | b'{' | b'<' => {
                depth += 1;
                if depth > MAX_TEXT_NESTING {
                    return Some((line, i - line_start + 1));
                }
            }
            b')' | b']' | b'}' | b'>' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    None
}

/// What both parse paths do first: refuse text nested too deep for MLIR's parser (see
/// [`MAX_TEXT_NESTING`]), then name `name` as the file MLIR reads, for a fatal error's message,
/// until the returned guard drops.
fn before_parse(bytes: &[u8], name: &Path) -> Result<super::fatal::Reading, IrError> {
    let deep = match ModuleFormat::detect(bytes) {
        ModuleFormat::Text => too_deep(bytes),
        ModuleFormat::Bytecode => None,
    };
    match deep {
        None => Ok(super::fatal::reading(name)),
        Some((line, col)) => Err(IrError::Parse {
            path: name.to_path_buf(),
            diagnostics: vec![format!(
                "{}:{line}:{col}: error: brackets nested deeper than {MAX_TEXT_NESTING} \
                 (MLIR's parser would overflow its stack)",
                name.display()
            )],
        }),
    }
}

/// Parses a module from bytes (text or bytecode, detected by content). `name` is what
/// diagnostics call the buffer.
pub fn load_bytes<'c>(ctx: &'c Context, bytes: &[u8], name: &Path) -> Result<Module<'c>, IrError> {
    // MLIR's parser takes a (pointer, length) pair, so non-UTF-8 bytes and interior NULs reach it
    // as they are and come back as diagnostics rather than panics.
    let _reading = before_parse(bytes, name)?;
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
    let _reading = before_parse(&bytes, path)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_is_counted_outside_strings_comments_and_arrows() {
        let nest = |n: usize| format!("{}{}", "(".repeat(n), ")".repeat(n));
        assert_eq!(too_deep(nest(MAX_TEXT_NESTING).as_bytes()), None);
        assert_eq!(
            too_deep(nest(MAX_TEXT_NESTING + 1).as_bytes()),
            Some((1, MAX_TEXT_NESTING + 1))
        );
        let mixed = format!("a\nb{}", "<[{".repeat(MAX_TEXT_NESTING));
        assert_eq!(too_deep(mixed.as_bytes()), Some((2, MAX_TEXT_NESTING + 2)));
        // brackets in a string (escaped quote included) or a comment, and `->`, do not count
        let hidden = format!(
            "\"\\\"{0}\" // {0}\n() -> () {1}",
            "(".repeat(2 * MAX_TEXT_NESTING),
            "->".repeat(2 * MAX_TEXT_NESTING)
        );
        assert_eq!(too_deep(hidden.as_bytes()), None);
    }

    #[test]
    fn a_module_nested_too_deep_is_refused_before_mlir_parses_it() {
        let ctx = crate::ir::new_context();
        let deep = format!("\"a.b\"() ({}", "\"a.b\"() ({".repeat(20_000));
        let err = load_bytes(&ctx, deep.as_bytes(), Path::new("deep.mlir")).err().unwrap();
        assert!(err.to_string().contains("deep.mlir:1:"), "{err}");
        assert!(err.to_string().contains("nested deeper than 1000"), "{err}");
    }
}
