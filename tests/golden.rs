//! Byte-identical outputs: every command's output on the bundled models hashes to the value
//! committed in `tests/data/golden_outputs.txt`, so a refactoring that claims to change no
//! behaviour is checked to the byte (quantized models in each output format and option, the
//! statistics files, `opt` pipelines, `evaluate --json`).
//!
//! The hashes hold for one CPU: calibration runs gemm, whose SIMD path (AVX-512 or AVX2) is
//! picked at run time, and a different accumulation order moves a range in its last bit. The
//! file keeps one block per CPU signature; on a CPU with no block the test says so and checks
//! only that two runs agree. `QUANTIR_BLESS=1 cargo test --test golden` records the current
//! CPU's block (after checking that each output is the same on two runs).

mod common;

use common::{data, ok};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;

const GOLDEN: &str = "tests/data/golden_outputs.txt";

/// One case: a name, the command with `{out}` standing for the output file (whose hash is
/// recorded; `None` hashes stdout) and `{out:NAME}` for the output of an earlier case.
struct Case {
    name: &'static str,
    args: Vec<String>,
    out: Option<&'static str>,
}

/// The cases, with paths relative to the folder the commands run in (see [`run_all`]): output
/// models record the input's path in their locations, so the paths must not depend on where
/// the checkout is. `cnn` stands for examples/digits_cnn.mlir with its calibration data, `mlp`
/// for tests/data/digits_mlp.mlir with its own; `quantize` cases calibrate on the model's data
/// without the cache.
fn cases(tmp: &Path) -> Vec<Case> {
    std::fs::write(
        tmp.join("mobilenet_v2_035.mlir"),
        common::model_text(&data("mobilenet_v2_035.mlir.gz")),
    )
    .unwrap();
    const CNN: &str = "examples/digits_cnn.mlir --data examples/digits_calib.npz";
    const MLP: &str = "data/digits_mlp.mlir --data data/digits_mlp_calib.npz";
    const MOBILE: &str = "--data data/mobilenet_test.npz --limit 6";
    #[rustfmt::skip]
    let table: &[(&str, &str, Option<&str>)] = &[
        // statistics first: later cases read cnn_stats.json
        ("cnn.calibrate.minmax", "calibrate {CNN} -o cnn_stats.json", None),
        ("cnn.calibrate.minmax.file", "cat cnn_stats.json", None),
        ("cnn.calibrate.entropy", "calibrate {CNN} --method entropy -o {out}", Some("json")),
        ("cnn.calibrate.percentile.onnx", "calibrate {CNN} --method percentile --onnx -o {out}", Some("json")),
        ("cnn.mlir", "quantize {CNN} -o {out}", Some("mlir")),
        ("cnn.mlirbc", "quantize {CNN} -o {out}", Some("mlirbc")),
        ("cnn.onnx", "quantize {CNN} -o {out}", Some("onnx")),
        ("cnn.int4", "quantize {CNN} --weights int4 -o {out}", Some("mlir")),
        ("cnn.int4.onnx", "quantize {CNN} --weights int4 -o {out}", Some("onnx")),
        ("cnn.fp16", "quantize {CNN} --weights fp16 -o {out}", Some("mlir")),
        ("cnn.bf16.weight_only", "quantize examples/digits_cnn.mlir --weights bf16 --activations none -o {out}", Some("mlir")),
        ("cnn.a16.onnx", "quantize {CNN} --activations int16 -o {out}", Some("onnx")),
        ("cnn.uint8.torch", "quantize {CNN} --activations uint8 --per-tensor --scheme torch -o {out}", Some("mlir")),
        ("cnn.symmetric.onnx", "quantize {CNN} --symmetric-activations -o {out}", Some("onnx")),
        ("cnn.reduce_range", "quantize {CNN} --scheme onnx --reduce-range -o {out}", Some("onnx")),
        ("cnn.outputs", "quantize {CNN} --quantize-outputs -o {out}", Some("mlir")),
        ("cnn.exclude", "quantize {CNN} --exclude tf.MatMul -o {out}", Some("mlir")),
        ("cnn.mse", "quantize {CNN} --method mse -o {out}", Some("mlir")),
        ("cnn.from_stats", "quantize examples/digits_cnn.mlir --stats cnn_stats.json -o {out}", Some("mlir")),
        ("cnn.opt.prepare", "opt examples/digits_cnn.mlir --pass strip-identity --pass fold-constants --pass fold-batchnorm -o {out}", Some("mlir")),
        ("cnn.opt.tf_to_onnx", "opt examples/digits_cnn.mlir --pass tf-to-onnx -o {out}", Some("mlir")),
        ("mlp.mlir", "quantize {MLP} -o {out}", Some("mlir")),
        ("mlp.onnx", "quantize {MLP} -o {out}", Some("onnx")),
        ("cnn.onnx_in.onnx", "quantize data/digits_cnn.onnx --data examples/digits_calib.npz -o {out}", Some("onnx")),
        ("cnn.onnx_in.mlir", "quantize data/digits_cnn.onnx --data examples/digits_calib.npz -o {out}", Some("mlir")),
        ("mlp.onnx_in.onnx", "quantize data/digits_mlp.onnx --data data/digits_mlp_calib.npz -o {out}", Some("onnx")),
        ("cnn.savedmodel.mlir", "quantize data/digits_cnn_savedmodel --data examples/digits_calib.npz -o {out}", Some("mlir")),
        ("cnn.savedmodel.onnx", "quantize data/digits_cnn_savedmodel --data examples/digits_calib.npz -o {out}", Some("onnx")),
        ("mlp.savedmodel.onnx", "quantize data/digits_mlp_savedmodel --data data/digits_mlp_calib.npz -o {out}", Some("onnx")),
        ("mobilenet.mlir", "quantize mobilenet_v2_035.mlir {MOBILE} -o {out}", Some("mlir")),
        ("mobilenet.onnx_in", "quantize data/mobilenet_v2_035.onnx {MOBILE} -o {out}", Some("onnx")),
        ("mobilenet.savedmodel.onnx", "quantize data/mobilenet_v2_035_savedmodel {MOBILE} -o {out}", Some("onnx")),
        ("cnn.evaluate.json", "evaluate examples/digits_cnn.mlir {out:cnn.mlir} --data examples/digits_test.npz --labels y --per-layer --json", None),
    ];
    table
        .iter()
        .map(|(name, cmd, out)| {
            let cmd = cmd
                .replace("{CNN}", CNN)
                .replace("{MLP}", MLP)
                .replace("{MOBILE}", MOBILE);
            let mut args: Vec<String> = cmd.split_whitespace().map(str::to_string).collect();
            if args[0] == "quantize" && args.iter().any(|a| a == "--data") {
                args.insert(args.len() - 2, "--no-cache".into());
            }
            Case { name, args, out: *out }
        })
        .collect()
}

/// The CPU features that choose gemm's kernels.
fn cpu_signature() -> String {
    let mut s = vec![std::env::consts::ARCH.to_string()];
    #[cfg(target_arch = "x86_64")]
    {
        for (name, on) in [
            ("avx512f", std::arch::is_x86_feature_detected!("avx512f")),
            ("avx2", std::arch::is_x86_feature_detected!("avx2")),
            ("fma", std::arch::is_x86_feature_detected!("fma")),
        ] {
            if on {
                s.push(name.to_string());
            }
        }
    }
    s.join("+")
}

/// Runs every case once, returning name → sha256 of its output.
fn run_all(tmp: &Path) -> BTreeMap<String, String> {
    std::os::unix::fs::symlink(common::root().join("examples"), tmp.join("examples")).unwrap();
    std::os::unix::fs::symlink(common::root().join("tests/data"), tmp.join("data")).unwrap();
    let cache = tmp.join("cache");
    let mut out = BTreeMap::new();
    for c in cases(tmp) {
        let file = c.out.map(|ext| format!("{}.{ext}", c.name));
        let args: Vec<String> = c
            .args
            .iter()
            .map(|a| {
                // `{out:NAME}`: the output of an earlier case
                let a = match a.strip_prefix("{out:").and_then(|r| r.strip_suffix('}')) {
                    Some(name) => format!("{name}.{}", name.rsplit('.').next().unwrap()),
                    None => a.clone(),
                };
                match &file {
                    Some(f) => a.replace("{out}", f),
                    None => a,
                }
            })
            .collect();
        let bytes = if args[0] == "cat" {
            std::fs::read(tmp.join(&args[1])).unwrap()
        } else {
            let o = std::process::Command::new(env!("CARGO_BIN_EXE_quantir"))
                .args(&args)
                .current_dir(tmp)
                .env("QUANTIR_CACHE_DIR", &cache)
                .output()
                .unwrap();
            let o = ok(o);
            match &file {
                Some(f) => std::fs::read(tmp.join(f)).unwrap(),
                None => o.stdout,
            }
        };
        out.insert(c.name.to_string(), hex(&Sha256::digest(&bytes)));
    }
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The recorded blocks: signature → (name → hash).
fn read_golden(text: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut blocks: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut cur = None;
    for line in text.lines() {
        if let Some(sig) = line.strip_prefix("[cpu ").and_then(|l| l.strip_suffix(']')) {
            cur = Some(sig.to_string());
            blocks.entry(sig.to_string()).or_default();
        } else if let (Some(sig), Some((name, h))) = (&cur, line.split_once(' ')) {
            if !line.starts_with('#') {
                blocks.get_mut(sig).unwrap().insert(name.to_string(), h.to_string());
            }
        }
    }
    blocks
}

fn write_golden(blocks: &BTreeMap<String, BTreeMap<String, String>>) -> String {
    let mut s = String::from(
        "# sha256 of each output of tests/golden.rs, one block per CPU signature\n\
         # (QUANTIR_BLESS=1 cargo test --test golden records the current CPU's block)\n",
    );
    for (sig, hashes) in blocks {
        s.push_str(&format!("[cpu {sig}]\n"));
        for (n, h) in hashes {
            s.push_str(&format!("{n} {h}\n"));
        }
    }
    s
}

#[test]
fn outputs_are_byte_identical_to_the_recorded_ones() {
    let path = common::root().join(GOLDEN);
    let mut blocks = read_golden(&std::fs::read_to_string(&path).unwrap_or_default());
    let sig = cpu_signature();
    let tmp = tempfile::tempdir().unwrap();
    let got = run_all(tmp.path());
    if std::env::var_os("QUANTIR_BLESS").is_some() {
        let again = run_all(tempfile::tempdir().unwrap().path());
        assert_eq!(got, again, "outputs differ between two runs: not deterministic");
        blocks.insert(sig, got);
        std::fs::write(&path, write_golden(&blocks)).unwrap();
        return;
    }
    let Some(want) = blocks.get(&sig) else {
        let again = run_all(tempfile::tempdir().unwrap().path());
        assert_eq!(got, again, "outputs differ between two runs: not deterministic");
        eprintln!("golden: no recorded hashes for CPU '{sig}'; checked only that two runs agree");
        return;
    };
    let differ: Vec<&String> = want.keys().filter(|k| got.get(*k) != want.get(*k)).collect();
    let missing: Vec<&String> = got.keys().filter(|k| !want.contains_key(*k)).collect();
    assert!(
        differ.is_empty() && missing.is_empty(),
        "outputs changed: {differ:?}; not recorded: {missing:?} ({GOLDEN}, CPU '{sig}')"
    );
}
