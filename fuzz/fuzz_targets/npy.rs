// quantir::fuzzing::npy under libFuzzer: `cargo +nightly fuzz run npy` (fuzz/README.md)
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    quantir::fuzzing::npy(data);
});

fn main() {
    quantir_fuzz::main()
}
