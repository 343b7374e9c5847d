// quantir::fuzzing::stats_json under libFuzzer: `cargo +nightly fuzz run stats_json` (fuzz/README.md)
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    quantir::fuzzing::stats_json(data);
});

fn main() {
    quantir_fuzz::main()
}
