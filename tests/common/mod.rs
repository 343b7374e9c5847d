//! Shared helpers of the integration tests.
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs the quantir binary.
pub fn quantir(args: &[&str]) -> Output {
    quantir_env(args, &[])
}

/// Runs the quantir binary with extra environment variables.
pub fn quantir_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_quantir"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// The names in a folder, sorted.
pub fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// `o`, after asserting that it succeeded (its stderr in the failure message).
pub fn ok(o: Output) -> Output {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    o
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A path as a command-line argument.
pub fn arg(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn data(name: &str) -> PathBuf {
    root().join("tests/data").join(name)
}

pub fn example(name: &str) -> PathBuf {
    root().join("examples").join(name)
}

/// The text of a model file, gunzipped when it ends in `.gz`.
pub fn model_text(path: &Path) -> Vec<u8> {
    let raw = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if path.extension().is_some_and(|e| e == "gz") {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&raw[..]).read_to_end(&mut out).unwrap();
        out
    } else {
        raw
    }
}

/// Every MLIR model the tests use: (name, text).
pub fn all_models() -> Vec<(String, Vec<u8>)> {
    [
        example("digits_cnn.mlir"),
        data("digits_mlp.mlir"),
        data("mobilenet_v2_035.mlir.gz"),
    ]
    .iter()
    .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), model_text(p)))
    .collect()
}

/// Runs `mlir-opt-22 --allow-unregistered-dialect` on a file; returns (success, stderr).
pub fn mlir_opt_accepts(path: &Path) -> (bool, String) {
    let out = std::process::Command::new("mlir-opt-22")
        .arg("--allow-unregistered-dialect")
        .arg(path)
        .arg("-o")
        .arg("/dev/null")
        .output()
        .expect("mlir-opt-22 must be installed (scripts/install-deps.sh installs mlir-22-tools)");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Runs tests/python/onnx_ref.py in the test venv (the real onnxruntime) and returns the JSON
/// object it prints last.
pub fn onnx_ref(args: &[&str]) -> serde_json::Value {
    onnx_ref_on(None, args)
}

/// [`onnx_ref`] with onnxruntime on an emulated CPU: `qemu-x86_64 -cpu CPU` runs the venv's
/// Python, so that onnxruntime's MLAS picks that CPU's int8 kernels (EPYC-Rome: AVX2 without
/// VNNI, whose u8s8 kernels add products in int16) on any x86 host.
pub fn onnx_ref_on(cpu: Option<&str>, args: &[&str]) -> serde_json::Value {
    let py = root().join(".venv/bin/python");
    let script = root().join("tests/python/onnx_ref.py");
    let mut cmd = match cpu {
        Some(c) => {
            let mut q = Command::new("qemu-x86_64");
            q.args(["-cpu", c]).arg(&py);
            q
        }
        None => Command::new(&py),
    };
    let o = cmd.arg(&script).args(args).output().unwrap_or_else(|e| {
        panic!(
            "{}: {e} (scripts/install-deps.sh installs it and creates the venv)",
            py.display()
        )
    });
    assert!(
        o.status.success(),
        "onnx_ref.py {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = String::from_utf8_lossy(&o.stdout);
    serde_json::from_str(text.lines().last().unwrap_or("")).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The bundled SavedModels: (directory under tests/data, test data, TensorFlow's outputs on it
/// under key `y`).
pub fn saved_models() -> [(&'static str, PathBuf, PathBuf); 3] {
    [
        (
            "digits_cnn_savedmodel",
            example("digits_test.npz"),
            data("digits_cnn_test_outputs.npz"),
        ),
        (
            "digits_mlp_savedmodel",
            data("digits_mlp_test.npz"),
            data("digits_mlp_test_outputs.npz"),
        ),
        (
            "mobilenet_v2_035_savedmodel",
            data("mobilenet_test.npz"),
            data("mobilenet_v2_035_test_outputs.npz"),
        ),
    ]
}

/// Peak resident memory of one `quantir` run in KB, from GNU time.
pub fn peak_rss_kb(args: &[&str]) -> u64 {
    let o = Command::new("/usr/bin/time")
        .args(["-f", "%M"])
        .arg(env!("CARGO_BIN_EXE_quantir"))
        .args(args)
        .output()
        .expect("/usr/bin/time (Debian package 'time', installed by scripts/install-deps.sh)");
    assert!(o.status.success(), "{}", stderr(&o));
    stderr(&o).trim().lines().last().unwrap().trim().parse().unwrap()
}

/// An MLIR `dense` f32 literal of `a`, in hex: a flat list is only a 1-D literal.
pub fn dense(a: &ndarray::ArrayD<f32>) -> String {
    let hex: String = a
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .map(|b| format!("{b:02X}"))
        .collect();
    let shape: Vec<String> = a.shape().iter().map(|d| d.to_string()).collect();
    format!("dense<\"0x{hex}\"> : tensor<{}xf32>", shape.join("x"))
}
