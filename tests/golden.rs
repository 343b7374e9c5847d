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

/// One case: a name and the command, `{out}` standing for the output file (whose hash is
/// recorded) and `{out:NAME}` for the output of an earlier case; `None` for the output means
/// stdout is hashed.
struct Case {
    name: &'static str,
    args: Vec<String>,
    out: Option<&'static str>,
}

/// The cases, with paths relative to the folder the commands run in (see [`run_all`]): output
/// models record the input's path in their locations, so the paths must not depend on where
/// the checkout is.
fn cases(tmp: &Path) -> Vec<Case> {
    let cnn = "examples/digits_cnn.mlir".to_string();
    let cnn_calib = "examples/digits_calib.npz".to_string();
    let cnn_test = "examples/digits_test.npz".to_string();
    let mlp = "data/digits_mlp.mlir".to_string();
    let mlp_calib = "data/digits_mlp_calib.npz".to_string();
    let mobile_npz = "data/mobilenet_test.npz".to_string();
    std::fs::write(
        tmp.join("mobilenet_v2_035.mlir"),
        common::model_text(&data("mobilenet_v2_035.mlir.gz")),
    )
    .unwrap();
    let mobile_mlir = "mobilenet_v2_035.mlir".to_string();
    let stats = "cnn_stats.json".to_string();
    let data = |name: &str| format!("data/{name}");
    let q = |name: &'static str, model: &str, calib: &str, extra: &[&str], out: &'static str| Case {
        name,
        args: ["quantize", model, "--data", calib, "--no-cache"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .chain(["-o".to_string(), "{out}".to_string()])
            .collect(),
        out: Some(out),
    };
    let cmd = |name: &'static str, args: &[&str], out: Option<&'static str>| Case {
        name,
        args: args.iter().map(|s| s.to_string()).collect(),
        out,
    };
    vec![
        // statistics first: later cases read {stats}
        cmd(
            "cnn.calibrate.minmax",
            &["calibrate", &cnn, "--data", &cnn_calib, "-o", &stats],
            None,
        ),
        cmd("cnn.calibrate.minmax.file", &["cat", &stats], None),
        cmd(
            "cnn.calibrate.entropy",
            &[
                "calibrate",
                &cnn,
                "--data",
                &cnn_calib,
                "--method",
                "entropy",
                "-o",
                "{out}",
            ],
            Some("json"),
        ),
        cmd(
            "cnn.calibrate.percentile.onnx",
            &[
                "calibrate",
                &cnn,
                "--data",
                &cnn_calib,
                "--method",
                "percentile",
                "--onnx",
                "-o",
                "{out}",
            ],
            Some("json"),
        ),
        q("cnn.mlir", &cnn, &cnn_calib, &[], "mlir"),
        q("cnn.mlirbc", &cnn, &cnn_calib, &[], "mlirbc"),
        q("cnn.onnx", &cnn, &cnn_calib, &[], "onnx"),
        q("cnn.int4", &cnn, &cnn_calib, &["--weights", "int4"], "mlir"),
        q("cnn.int4.onnx", &cnn, &cnn_calib, &["--weights", "int4"], "onnx"),
        q("cnn.fp16", &cnn, &cnn_calib, &["--weights", "fp16"], "mlir"),
        cmd(
            "cnn.bf16.weight_only",
            &[
                "quantize",
                &cnn,
                "--weights",
                "bf16",
                "--activations",
                "none",
                "-o",
                "{out}",
            ],
            Some("mlir"),
        ),
        q("cnn.a16.onnx", &cnn, &cnn_calib, &["--activations", "int16"], "onnx"),
        q(
            "cnn.uint8.torch",
            &cnn,
            &cnn_calib,
            &["--activations", "uint8", "--per-tensor", "--scheme", "torch"],
            "mlir",
        ),
        q(
            "cnn.symmetric.onnx",
            &cnn,
            &cnn_calib,
            &["--symmetric-activations"],
            "onnx",
        ),
        q(
            "cnn.reduce_range",
            &cnn,
            &cnn_calib,
            &["--scheme", "onnx", "--reduce-range"],
            "onnx",
        ),
        q("cnn.outputs", &cnn, &cnn_calib, &["--quantize-outputs"], "mlir"),
        q("cnn.exclude", &cnn, &cnn_calib, &["--exclude", "tf.MatMul"], "mlir"),
        q("cnn.mse", &cnn, &cnn_calib, &["--method", "mse"], "mlir"),
        cmd(
            "cnn.from_stats",
            &["quantize", &cnn, "--stats", &stats, "-o", "{out}"],
            Some("mlir"),
        ),
        cmd(
            "cnn.opt.prepare",
            &[
                "opt",
                &cnn,
                "--pass",
                "strip-identity",
                "--pass",
                "fold-constants",
                "--pass",
                "fold-batchnorm",
                "-o",
                "{out}",
            ],
            Some("mlir"),
        ),
        cmd(
            "cnn.opt.tf_to_onnx",
            &["opt", &cnn, "--pass", "tf-to-onnx", "-o", "{out}"],
            Some("mlir"),
        ),
        q("mlp.mlir", &mlp, &mlp_calib, &[], "mlir"),
        q("mlp.onnx", &mlp, &mlp_calib, &[], "onnx"),
        q("cnn.onnx_in.onnx", &data("digits_cnn.onnx"), &cnn_calib, &[], "onnx"),
        q("cnn.onnx_in.mlir", &data("digits_cnn.onnx"), &cnn_calib, &[], "mlir"),
        q("mlp.onnx_in.onnx", &data("digits_mlp.onnx"), &mlp_calib, &[], "onnx"),
        q(
            "cnn.savedmodel.mlir",
            &data("digits_cnn_savedmodel"),
            &cnn_calib,
            &[],
            "mlir",
        ),
        q(
            "cnn.savedmodel.onnx",
            &data("digits_cnn_savedmodel"),
            &cnn_calib,
            &[],
            "onnx",
        ),
        q(
            "mlp.savedmodel.onnx",
            &data("digits_mlp_savedmodel"),
            &mlp_calib,
            &[],
            "onnx",
        ),
        q("mobilenet.mlir", &mobile_mlir, &mobile_npz, &["--limit", "6"], "mlir"),
        q(
            "mobilenet.onnx_in",
            &data("mobilenet_v2_035.onnx"),
            &mobile_npz,
            &["--limit", "6"],
            "onnx",
        ),
        q(
            "mobilenet.savedmodel.onnx",
            &data("mobilenet_v2_035_savedmodel"),
            &mobile_npz,
            &["--limit", "6"],
            "onnx",
        ),
        cmd(
            "cnn.evaluate.json",
            &[
                "evaluate",
                &cnn,
                "{out:cnn.mlir}",
                "--data",
                &cnn_test,
                "--labels",
                "y",
                "--per-layer",
                "--json",
            ],
            None,
        ),
    ]
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
