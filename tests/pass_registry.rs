//! The pass registry as a user meets it: `opt --help` lists every pass with its summary, every
//! pass runs alone through `opt` (statistics passes with `--stats`), and `quantize --json`
//! accounts for every compute op.

mod common;

use common::{arg, example, ok, quantir, stderr};

#[test]
fn opt_help_lists_every_pass_with_its_summary() {
    let o = ok(quantir(&["opt", "--help"]));
    let help = String::from_utf8_lossy(&o.stdout);
    for p in quantir::passes::PASSES {
        assert!(
            help.contains(&format!("{}:", p.name)) && help.contains(p.summary),
            "opt --help lacks {}: {help}",
            p.name
        );
    }
    assert!(help.contains("prepare:"), "{help}");
}

/// Runs `quantir` on a command line split at spaces, `{d}` standing for the temporary folder.
fn sh(d: &std::path::Path, line: &str) -> std::process::Output {
    let line = line
        .replace("{d}", &arg(d))
        .replace("{cnn}", &arg(&example("digits_cnn.mlir")));
    let args: Vec<&str> = line.split_whitespace().collect();
    quantir(&args)
}

#[test]
fn opt_runs_the_quantize_passes_alone_as_quantize_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let calib = arg(&example("digits_calib.npz"));
    ok(sh(d, &format!("calibrate {{cnn}} --data {calib} -o {{d}}/s.json")));
    ok(sh(d, "quantize {cnn} --stats {d}/s.json -o {d}/q.mlir"));
    // the same passes through opt: prepare, then the two statistics passes
    let o = ok(sh(
        d,
        "opt {cnn} --pass prepare --pass quantize-weights --pass insert-qdq --stats {d}/s.json -o {d}/opt.mlir",
    ));
    let log = stderr(&o);
    assert!(
        log.contains("quantize-weights: 4 weights quantized, 4 biases quantized to int32"),
        "{log}"
    );
    assert!(log.contains("insert-qdq: 6 q/dq pairs inserted"), "{log}");
    assert_eq!(
        std::fs::read(d.join("opt.mlir")).unwrap(),
        std::fs::read(d.join("q.mlir")).unwrap(),
        "opt --pass prepare --pass quantize-weights --pass insert-qdq differs from quantize"
    );
    // each statistics pass alone on a prepared model
    ok(sh(d, "opt {cnn} --pass prepare -o {d}/prepared.mlir"));
    ok(sh(
        d,
        "opt {d}/prepared.mlir --pass insert-qdq --stats {d}/s.json -o {d}/qdq.mlir",
    ));
    let text = std::fs::read_to_string(d.join("qdq.mlir")).unwrap();
    assert!(
        text.contains("quant.qcast") && !text.contains("quant.scast"),
        "insert-qdq alone"
    );
    ok(sh(
        d,
        "opt {d}/prepared.mlir --pass quantize-weights --stats {d}/s.json -o {d}/w.mlir",
    ));
    let text = std::fs::read_to_string(d.join("w.mlir")).unwrap();
    assert!(
        text.contains("quant.scast") && text.contains("xi32>"),
        "weights and int32 biases"
    );
    // without statistics, and with statistics of the unprepared form: named errors, exit 1
    for (line, msg) in [
        (
            "opt {cnn} --pass insert-qdq -o {d}/x.mlir",
            "insert-qdq: needs statistics (--stats",
        ),
        (
            "opt {cnn} --pass insert-qdq --stats {d}/s.json -o {d}/x.mlir",
            "run --pass prepare first",
        ),
    ] {
        let o = sh(d, line);
        assert_eq!(o.status.code(), Some(1));
        assert!(stderr(&o).contains(msg), "{}", stderr(&o));
    }
    assert!(!d.join("x.mlir").exists());
    // weight-only needs no statistics
    ok(sh(
        d,
        "opt {cnn} --pass quantize-weights --activations none --weights fp16 -o {d}/fp16.mlir",
    ));
}

fn quantize_json(extra: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("q.onnx");
    let mut args = vec![
        "quantize".to_string(),
        arg(&example("digits_cnn.mlir")),
        "--data".into(),
        arg(&example("digits_calib.npz")),
        "--no-cache".into(),
        "--json".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args.extend(["-o".into(), arg(&out)]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = ok(quantir(&refs));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

#[test]
fn quantize_json_accounts_for_every_compute_op() {
    let j = quantize_json(&[]);
    let ops = j["ops"].as_array().unwrap();
    // digits CNN: 2 convolutions and 2 matmuls, lowered for the .onnx output
    assert_eq!(ops.len(), 4, "{j:#}");
    for o in ops {
        for field in ["key", "op", "weights", "activations", "reason", "macs"] {
            assert!(o.get(field).is_some(), "{field} missing in {o}");
        }
        // uint8 weights where onnxruntime's u8s8 kernel could saturate (the .onnx default)
        assert!(o["weights"] == "i8" || o["weights"] == "u8", "{o}");
        assert!(o["activations"] == "i8" || o["activations"] == "u8", "{o}");
        assert!(o["macs"].as_u64().unwrap() > 0, "{o}");
    }
    let t = &j["totals"];
    assert_eq!(t["int8_mac_share"].as_f64(), Some(1.0), "{t}");
    let sum: u64 = ops.iter().map(|o| o["macs"].as_u64().unwrap()).sum();
    assert_eq!(t["macs"].as_u64(), Some(sum));
    for field in ["constant_bytes_before", "constant_bytes_after"] {
        assert!(t[field].as_u64().unwrap() > 0, "{field}");
    }
    assert!(!j["stages"].as_array().unwrap().is_empty());
    // conv1: 8×8×16 outputs of a 3×3 window over 1 channel; conv2: 8×8×32 outputs over 3×3×16;
    // dense layers 512 → 64 → 10
    let macs: Vec<u64> = ops.iter().map(|o| o["macs"].as_u64().unwrap()).collect();
    assert_eq!(macs, [8 * 8 * 16 * 9, 8 * 8 * 32 * 9 * 16, 512 * 64, 64 * 10]);

    // a matmul left float by --exclude: the share drops below 1 and the op says why
    let j = quantize_json(&["--exclude", "onnx.MatMul"]);
    let t = &j["totals"];
    let share = t["int8_mac_share"].as_f64().unwrap();
    assert!(share > 0.0 && share < 1.0, "{t}");
    let excluded: Vec<&serde_json::Value> = j["ops"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["op"] == "onnx.MatMul")
        .collect();
    assert!(!excluded.is_empty());
    for o in excluded {
        assert_eq!(o["weights"], "float");
        assert!(o["reason"].as_str().unwrap().contains("excluded"), "{o}");
    }
}
