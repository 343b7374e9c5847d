#![no_main]
// quantir::fuzzing::npz under libFuzzer: `cargo +nightly fuzz run npz` (fuzz/README.md)
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    quantir::fuzzing::npz(data);
});
