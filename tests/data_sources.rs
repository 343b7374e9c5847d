//! Sample data from image folders, the calibration cache of `quantize --data`, recipes, and
//! every error of the main job's commands: exit 1, one clear line, nothing written.

mod common;

use common::{arg, ok, peak_rss_kb, quantir, quantir_env, stderr};

use ndarray_npy::NpzWriter;
use std::path::Path;
use std::process::Output;

/// Exit 1, a one-line message containing every part of `needles`.
fn fails_with(o: &Output, needles: &[&str]) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert_eq!(e.trim_end().lines().count(), 1, "one line: {e}");
    for n in needles {
        assert!(e.contains(n), "'{n}' not in: {e}");
    }
}

/// The first `n` digits test images as 8-bit grayscale PNGs, and the same pixels (÷ 255) as an
/// npz array.
fn digits_as_pngs(dir: &Path, n: usize) -> std::path::PathBuf {
    let mut npz =
        ndarray_npy::NpzReader::new(std::fs::File::open(common::example("digits_test.npz")).unwrap()).unwrap();
    let x: ndarray::ArrayD<f32> = npz.by_name("x").unwrap();
    let imgs = dir.join("imgs");
    std::fs::create_dir(&imgs).unwrap();
    let mut back = Vec::new();
    for i in 0..n {
        let px: Vec<u8> = x
            .index_axis(ndarray::Axis(0), i)
            .iter()
            .map(|v| (v.clamp(0.0, 1.0) * 255.0).round() as u8)
            .collect();
        back.extend(px.iter().map(|&p| p as f32 / 255.0));
        image::GrayImage::from_raw(8, 8, px)
            .unwrap()
            .save(imgs.join(format!("{i:03}.png")))
            .unwrap();
    }
    let a = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[n, 8, 8, 1]), back).unwrap();
    let mut w = NpzWriter::new(std::fs::File::create(dir.join("same.npz")).unwrap());
    w.add_array("x", &a).unwrap();
    w.finish().unwrap();
    imgs
}

fn read_npz(p: &Path) -> ndarray::ArrayD<f32> {
    let mut r = ndarray_npy::NpzReader::new(std::fs::File::open(p).unwrap()).unwrap();
    let name = r.names().unwrap()[0].clone();
    r.by_name(&name).unwrap()
}

#[test]
fn image_folder_gives_the_same_outputs_as_the_same_pixels_in_an_npz() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = digits_as_pngs(dir.path(), 12);
    let model = arg(&common::example("digits_cnn.mlir"));
    let (a, b) = (dir.path().join("a.npz"), dir.path().join("b.npz"));
    ok(quantir(&["run", &model, "--data", &arg(&imgs), "-o", &arg(&a)]));
    ok(quantir(&[
        "run",
        &model,
        "--data",
        &arg(&dir.path().join("same.npz")),
        "-o",
        &arg(&b),
    ]));
    let (a, b) = (read_npz(&a), read_npz(&b));
    assert_eq!(a.shape(), &[12, 10]);
    assert_eq!(a, b, "decoded pixels differ from the npz's");
    // --limit, --mean/--std: (x - 0.5) / 0.5 changes the outputs
    let c = dir.path().join("c.npz");
    ok(quantir(&[
        "run",
        &model,
        "--data",
        &arg(&imgs),
        "-o",
        &arg(&c),
        "--limit",
        "5",
        "--mean",
        "0.5",
        "--std",
        "0.5",
    ]));
    let c = read_npz(&c);
    assert_eq!(c.shape(), &[5, 10]);
    assert_ne!(c.index_axis(ndarray::Axis(0), 0), a.index_axis(ndarray::Axis(0), 0));
    // images calibrate and quantize like arrays
    let q = dir.path().join("q.mlirbc");
    ok(quantir(&[
        "quantize",
        &model,
        "--data",
        &arg(&imgs),
        "--no-cache",
        "-o",
        &arg(&q),
    ]));
    // a resize to another size than the model's is refused before any work
    let o = quantir(&[
        "run",
        &model,
        "--data",
        &arg(&imgs),
        "-o",
        &arg(&dir.path().join("d.npz")),
        "--image-size",
        "4,4",
    ]);
    fails_with(&o, &["input", "4,4"]);
}

#[test]
fn unreadable_image_is_named_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = digits_as_pngs(dir.path(), 3);
    std::fs::write(imgs.join("001.png"), b"not a png at all").unwrap();
    let model = arg(&common::example("digits_cnn.mlir"));
    let out = dir.path().join("stats.json");
    let o = quantir(&["calibrate", &model, "--data", &arg(&imgs), "-o", &arg(&out)]);
    fails_with(&o, &["001.png"]);
    assert!(!out.exists());
}

#[test]
fn quantize_data_caches_calibration_and_reuses_it_for_other_rewrite_options() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let env = [("QUANTIR_CACHE_DIR", cache.to_str().unwrap())];
    let model = arg(&common::example("digits_cnn.mlir"));
    let calib = arg(&common::example("digits_calib.npz"));
    let q = |name: &str, extra: &[&str]| {
        let out = arg(&dir.path().join(name));
        let mut args = vec!["quantize", &model, "--data", &calib, "-o", &out];
        args.extend_from_slice(extra);
        let o = ok(quantir_env(&args, &env));
        (stderr(&o), std::fs::read(dir.path().join(name)).unwrap())
    };
    let (e1, m1) = q("a.mlir", &[]);
    assert!(e1.contains("calibrated"), "{e1}");
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 1);
    // same calibration, other rewrite options: from the cache
    let (e2, _) = q("b.mlir", &["--weights", "int4", "--activations", "int16"]);
    assert!(e2.contains("from cache"), "{e2}");
    // the cached statistics give the identical model
    let (e3, m3) = q("c.mlir", &[]);
    assert!(e3.contains("from cache"), "{e3}");
    assert_eq!(m1, m3);
    // another method is another entry; --no-cache recalibrates
    let (e4, _) = q("d.mlir", &["--method", "percentile"]);
    assert!(e4.contains("calibrated"), "{e4}");
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 2);
    let (e5, _) = q("e.mlir", &["--no-cache"]);
    assert!(e5.contains("calibrated"), "{e5}");
}

#[test]
fn main_job_errors_are_one_line_exit_1_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let model = arg(&common::example("digits_cnn.mlir"));
    let out = d.join("out.mlir");
    let nothing_written = || assert!(!out.exists());
    // empty data set
    let empty = d.join("empty.npz");
    let mut w = NpzWriter::new(std::fs::File::create(&empty).unwrap());
    w.add_array("x", &ndarray::Array4::<f32>::zeros((0, 8, 8, 1))).unwrap();
    w.finish().unwrap();
    let o = quantir(&[
        "quantize",
        &model,
        "--data",
        &arg(&empty),
        "--no-cache",
        "-o",
        &arg(&out),
    ]);
    fails_with(&o, &["empty.npz", "no samples"]);
    nothing_written();
    // data that does not match the model: names the file, the input, expected and found
    let wrong = d.join("wrong.npz");
    let mut w = NpzWriter::new(std::fs::File::create(&wrong).unwrap());
    w.add_array("input", &ndarray::Array4::<f32>::zeros((3, 9, 9, 1)))
        .unwrap();
    w.finish().unwrap();
    let o = quantir(&["calibrate", &model, "--data", &arg(&wrong), "-o", &arg(&out)]);
    fails_with(&o, &["wrong.npz", "input", "8x8x1", "[9, 9, 1]"]);
    nothing_written();
    // NaN in a sample
    let nan = d.join("nan.npz");
    let mut x = ndarray::Array4::<f32>::zeros((4, 8, 8, 1));
    x[[2, 3, 3, 0]] = f32::NAN;
    let mut w = NpzWriter::new(std::fs::File::create(&nan).unwrap());
    w.add_array("x", &x).unwrap();
    w.finish().unwrap();
    let o = quantir(&["quantize", &model, "--data", &arg(&nan), "--no-cache", "-o", &arg(&out)]);
    fails_with(&o, &["nan.npz", "sample 2", "NaN"]);
    nothing_written();
    // statistics that lack a tensor the plan quantizes
    let stats = d.join("stats.json");
    ok(quantir(&[
        "calibrate",
        &model,
        "--data",
        &arg(&common::example("digits_calib.npz")),
        "-o",
        &arg(&stats),
    ]));
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    let first = v["tensors"].as_object().unwrap().keys().next().unwrap().clone();
    v["tensors"].as_object_mut().unwrap().remove(&first);
    std::fs::write(&stats, serde_json::to_vec(&v).unwrap()).unwrap();
    let o = quantir(&["quantize", &model, "--stats", &arg(&stats), "-o", &arg(&out)]);
    fails_with(&o, &["no statistics for tensor", &first]);
    nothing_written();
    // a recipe with an unknown key names the file, line and column
    let recipe = d.join("r.toml");
    std::fs::write(&recipe, "weights = \"int8\"\nwieghts = \"int4\"\n").unwrap();
    let o = quantir(&[
        "quantize",
        &model,
        "--stats",
        &arg(&d.join("x.json")),
        "--config",
        &arg(&recipe),
        "-o",
        &arg(&out),
    ]);
    fails_with(&o, &["r.toml", "line 2, column 1", "wieghts"]);
    nothing_written();
}

#[test]
fn recipe_overrides_storage_per_op_and_excludes_by_key() {
    let dir = tempfile::tempdir().unwrap();
    let model = arg(&common::example("digits_cnn.mlir"));
    let recipe = dir.path().join("r.toml");
    std::fs::write(
        &recipe,
        "method = \"minmax\"\n[[override]]\nmatch = \"tf.MatMul\"\nactivations = \"int16\"\n\
         [[override]]\nmatch = \"tf.Conv2D\"\nweights = \"fp16\"\n",
    )
    .unwrap();
    let out = dir.path().join("q.mlir");
    ok(quantir(&[
        "quantize",
        &model,
        "--data",
        &arg(&common::example("digits_calib.npz")),
        "--no-cache",
        "--config",
        &arg(&recipe),
        "-o",
        &arg(&out),
    ]));
    let text = std::fs::read_to_string(&out).unwrap();
    // input, two conv outputs, the MaxPool output at the conv's scale, then both MatMul inputs
    // requantized to int16; the conv weights half, the matmul weights int8
    assert_eq!(text.lines().filter(|l| l.contains("quant.qcast")).count(), 6, "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.contains("quant.qcast") && l.contains("!quant.uniform<i16:f32"))
            .count(),
        2
    );
    assert_eq!(
        text.lines()
            .filter(|l| l.contains("\"tf.Cast\"") && l.contains("xf16>"))
            .count(),
        2
    );
    assert_eq!(
        text.lines()
            .filter(|l| l.contains("quant.scast") && l.contains("i8<-127:127>"))
            .count(),
        2
    );
}

/// One 3×3 convolution on a 64×128 single-channel image: 32 KB per sample, so that 2,000
/// samples (64 MB) held in memory would dwarf the process.
const WIDE_CONV: &str = r#"func.func @main(%x: tensor<1x64x128x1xf32>) -> tensor<1x64x128x4xf32> {
  %w = "tf.Const"() <{value = dense<0.25> : tensor<3x3x1x4xf32>}> : () -> tensor<3x3x1x4xf32>
  %0 = "tf.Conv2D"(%x, %w) <{data_format = "NHWC", padding = "SAME", strides = [1, 1, 1, 1]}> : (tensor<1x64x128x1xf32>, tensor<3x3x1x4xf32>) -> tensor<1x64x128x4xf32>
  %1 = "tf.Relu"(%0) : (tensor<1x64x128x4xf32>) -> tensor<1x64x128x4xf32>
  return %1 : tensor<1x64x128x4xf32>
}"#;

#[test]
fn calibration_memory_does_not_grow_with_the_number_of_samples() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("wide.mlir");
    std::fs::write(&model, WIDE_CONV).unwrap();
    let data = |n: usize, name: &str| {
        let a =
            ndarray::Array4::<f32>::from_shape_fn((n, 64, 128, 1), |(i, y, x, _)| ((i * 7 + y + x) % 16) as f32 / 16.0);
        let p = dir.path().join(name);
        let mut w = NpzWriter::new_compressed(std::fs::File::create(&p).unwrap());
        w.add_array("x", &a).unwrap();
        w.finish().unwrap();
        arg(&p)
    };
    let (small, large) = (data(100, "100.npz"), data(2000, "2000.npz"));
    let out = arg(&dir.path().join("s.json"));
    for method in ["minmax", "entropy"] {
        let a = peak_rss_kb(&[
            "calibrate",
            &arg(&model),
            "--data",
            &small,
            "--method",
            method,
            "-o",
            &out,
        ]);
        let b = peak_rss_kb(&[
            "calibrate",
            &arg(&model),
            "--data",
            &large,
            "--method",
            method,
            "-o",
            &out,
        ]);
        assert!(
            (b as f64) <= 1.10 * a as f64,
            "{method}: peak RSS {a} KB with 100 samples, {b} KB with 2,000"
        );
    }
}
