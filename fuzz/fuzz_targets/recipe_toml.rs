// quantir::fuzzing::recipe_toml under libFuzzer: `cargo +nightly fuzz run recipe_toml` (fuzz/README.md)
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    quantir::fuzzing::recipe_toml(data);
});

fn main() {
    quantir_fuzz::main()
}
