// quantir::fuzzing::mlir_bytecode under libFuzzer: `cargo +nightly fuzz run mlir_bytecode` (fuzz/README.md)
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    quantir::fuzzing::mlir_bytecode(data);
});

fn main() {
    quantir_fuzz::main()
}
