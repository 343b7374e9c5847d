//! LLVM's fatal errors as quantir errors: one line naming the file, exit status 1.
//!
//! Parts of MLIR give up on a damaged input by calling `llvm::report_fatal_error`, which prints
//! `LLVM ERROR: …` and aborts. MLIR 22's bytecode reader does so on a type whose shape declares
//! more dimensions than memory holds ("SmallVector unable to grow"; found by fuzzing,
//! `tests/data/mlir_aborts/`). That cannot be caught or returned from: the handler [`install`]
//! puts in place ends the process the way any other quantir error does — one line on stderr
//! naming the file MLIR was reading, status 1 — instead of SIGABRT. Outputs are written
//! atomically, so nothing half-written is left behind either way.

use std::ffi::{c_char, CStr};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

extern "C" {
    /// llvm-c/ErrorHandling.h: the handler is called with the reason; LLVM aborts if it returns.
    fn LLVMInstallFatalErrorHandler(handler: extern "C" fn(*const c_char));
}

/// The file MLIR is reading now, for the handler's message.
static READING: Mutex<Option<PathBuf>> = Mutex::new(None);

/// While alive, names `path` as the file MLIR is reading; restores the previous name on drop.
pub(crate) struct Reading(Option<PathBuf>);

/// Marks `path` as the file MLIR reads until the returned guard drops.
pub(crate) fn reading(path: &Path) -> Reading {
    let mut slot = READING.lock().unwrap_or_else(|p| p.into_inner());
    Reading(slot.replace(path.to_path_buf()))
}

impl Drop for Reading {
    fn drop(&mut self) {
        *READING.lock().unwrap_or_else(|p| p.into_inner()) = self.0.take();
    }
}

/// The line printed for a fatal error with `reason` while reading `file`.
fn message(file: Option<&Path>, reason: &str) -> String {
    match file {
        Some(f) => format!(
            "quantir: error: {}: MLIR gave up reading it (a damaged file?): {reason}\n",
            f.display()
        ),
        None => format!("quantir: error: MLIR gave up: {reason}\n"),
    }
}

extern "C" fn on_fatal(reason: *const c_char) {
    let reason = if reason.is_null() {
        "no reason given".into()
    } else {
        // SAFETY: LLVM passes a NUL-terminated string
        unsafe { CStr::from_ptr(reason) }.to_string_lossy()
    };
    // try_lock: the thread that holds the lock may be the one that failed
    let file = READING.try_lock().ok().and_then(|g| g.clone());
    let line = message(file.as_deref(), reason.trim_end());
    // Straight to fd 2 and _exit: this runs inside MLIR's C++, where unwinding or running
    // destructors and atexit handlers is not safe.
    unsafe {
        libc::write(2, line.as_ptr() as *const _, line.len());
        libc::_exit(1)
    }
}

/// Makes LLVM's fatal errors end the process with [`message`] and status 1 (the CLI calls it
/// first thing).
pub fn install() {
    // SAFETY: `on_fatal` has the C signature LLVM expects and never returns
    unsafe { LLVMInstallFatalErrorHandler(on_fatal) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_the_file_being_read() {
        assert_eq!(message(None, "x"), "quantir: error: MLIR gave up: x\n");
        let _g = reading(Path::new("/m/a.mlirbc"));
        let f = READING.lock().unwrap().clone();
        assert_eq!(
            message(f.as_deref(), "SmallVector unable to grow"),
            "quantir: error: /m/a.mlirbc: MLIR gave up reading it (a damaged file?): SmallVector unable to grow\n"
        );
    }
}
