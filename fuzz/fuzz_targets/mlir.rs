// quantir::fuzzing::mlir under libFuzzer: `cargo +nightly fuzz run mlir` (fuzz/README.md)
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    quantir::fuzzing::mlir(data);
});

fn main() {
    quantir_fuzz::main()
}
