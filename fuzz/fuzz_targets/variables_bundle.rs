// quantir::fuzzing::variables_bundle under libFuzzer: `cargo +nightly fuzz run variables_bundle` (fuzz/README.md)
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    quantir::fuzzing::variables_bundle(data);
});

fn main() {
    quantir_fuzz::main()
}
