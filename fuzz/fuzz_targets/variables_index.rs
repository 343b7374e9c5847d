// quantir::fuzzing::variables_index under libFuzzer: `cargo +nightly fuzz run variables_index` (fuzz/README.md)
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    quantir::fuzzing::variables_index(data);
});

fn main() {
    quantir_fuzz::main()
}
