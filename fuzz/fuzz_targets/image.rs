// quantir::fuzzing::image under libFuzzer: `cargo +nightly fuzz run image` (fuzz/README.md)
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    quantir::fuzzing::image(data);
});

fn main() {
    quantir_fuzz::main()
}
