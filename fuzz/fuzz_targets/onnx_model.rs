// quantir::fuzzing::onnx_model under libFuzzer: `cargo +nightly fuzz run onnx_model` (fuzz/README.md)
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    quantir::fuzzing::onnx_model(data);
});

fn main() {
    quantir_fuzz::main()
}
