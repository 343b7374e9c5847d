//! libFuzzer's driver started from Rust's `main`.
//!
//! A target binary cannot be `#![no_main]` and take libFuzzer's own `main`: Debian's MLIR 22
//! static libraries, which melior links, include `libMLIRMlirOptMain.a`, and its `main`
//! (mlir-opt's) is the one the linker takes from the archives. So each target defines a Rust
//! `main` — an object of the binary itself, which wins over any archive member — and calls
//! `LLVMFuzzerRunDriver`, libFuzzer's entry point for programs with their own `main` (LLVM ≥
//! 12), with the callback `fuzz_target!` registered.

use std::ffi::{c_char, c_int, CString};

extern "C" {
    fn LLVMFuzzerRunDriver(
        argc: *mut c_int,
        argv: *mut *mut *mut c_char,
        callback: extern "C" fn(*const u8, usize) -> c_int,
    ) -> c_int;
}

/// One input: `fuzz_target!`'s body behind libfuzzer-sys's wrapper (which turns a panic into
/// an abort libFuzzer reports as a crash).
extern "C" fn one_input(data: *const u8, size: usize) -> c_int {
    // SAFETY: libFuzzer passes a buffer of `size` readable bytes
    unsafe { libfuzzer_sys::test_input_wrap(data, size) }
}

/// Runs libFuzzer with this process's arguments and exits with its status.
pub fn main() -> ! {
    let args: Vec<CString> = std::env::args_os()
        .map(|a| CString::new(a.into_encoded_bytes()).expect("argument with a NUL byte"))
        .collect();
    let mut argv: Vec<*mut c_char> = args.iter().map(|a| a.as_ptr() as *mut c_char).collect();
    let mut argc = argv.len() as c_int;
    argv.push(std::ptr::null_mut());
    let mut argv_ptr = argv.as_mut_ptr();
    // SAFETY: argv is a NUL-terminated array of argc C strings that outlive the call
    let status = unsafe { LLVMFuzzerRunDriver(&mut argc, &mut argv_ptr, one_input) };
    std::process::exit(status)
}
