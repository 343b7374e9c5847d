// quantir::fuzzing::npz under libFuzzer: `cargo +nightly fuzz run npz` (fuzz/README.md)
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    quantir::fuzzing::npz(data);
});

fn main() {
    quantir_fuzz::main()
}
