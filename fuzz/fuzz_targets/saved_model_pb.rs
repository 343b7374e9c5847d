// quantir::fuzzing::saved_model_pb under libFuzzer: `cargo +nightly fuzz run saved_model_pb` (fuzz/README.md)
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    quantir::fuzzing::saved_model_pb(data);
});

fn main() {
    quantir_fuzz::main()
}
