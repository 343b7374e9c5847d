//! Agreement with onnxruntime's own calibrators on the arrays of calibration_vectors.npz
//! (each 20 batches of 4096 values, observed one batch at a time as onnxruntime did).
//!
//! - min/max: exactly equal.
//! - percentile (99.999 % symmetric, 99.99 % two-sided, both 2048 bins): within the sum of
//!   the two tools' bin widths (each locates the quantile inside one of its own bins;
//!   onnxruntime returns a bin edge, quantir interpolates inside its bin).
//! - entropy (2048 bins, 128 quantized bins): onnxruntime searches a different family of
//!   candidates (a two-sided slice quantized to 128 bins, i.e. 64 per side), so the thresholds
//!   differ; quantir's is at least as good by the KL divergence it minimises, evaluated on the
//!   same histogram at onnxruntime's threshold.

use ndarray::Array2;
use quantir_calibration::{select, Histogram};

#[test]
fn matches_onnxruntime_calibrators() {
    let f = std::fs::File::open(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/calibration_vectors.npz"
    ))
    .unwrap();
    let mut npz = ndarray_npy::NpzReader::new(f).unwrap();
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/calibration_vectors.json"
    ))
    .unwrap();
    let refs: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = refs["cases"].as_object().unwrap();
    assert_eq!(cases.len(), 5);
    let pair = |v: &serde_json::Value| (v[0].as_f64().unwrap() as f32, v[1].as_f64().unwrap() as f32);
    for (name, r) in cases {
        let a: Array2<f32> = npz.by_name(&format!("{name}.npy")).unwrap();
        let mut mm = quantir_calibration::MinMax::default();
        let mut h = Histogram::new(2048);
        for row in a.rows() {
            let xs = row.as_slice().unwrap();
            mm.observe_slice(xs);
            h.observe_slice(xs);
        }
        assert_eq!(
            mm.range(),
            Some((r["min"].as_f64().unwrap() as f32, r["max"].as_f64().unwrap() as f32)),
            "{name}: min/max"
        );
        assert_eq!((h.min(), h.max()), mm.range().unwrap());

        let absmax = h.min().abs().max(h.max().abs());
        let ort_w = 2.0 * absmax / 2048.0; // onnxruntime's bins span [-absmax, absmax]
        let tol = ort_w + h.width() as f32;
        let (rl, rh) = pair(&r["percentile_99.999_symmetric_2048"]);
        let (l, hi) = select::percentile_symmetric(&h, 99.999).unwrap();
        assert!(
            (l - rl).abs() <= tol && (hi - rh).abs() <= tol,
            "{name} symmetric percentile ({l}, {hi}) vs ({rl}, {rh}), tol {tol}"
        );
        let (rl, rh) = pair(&r["percentile_99.99_2048"]);
        let (l, hi) = select::percentile(&h, 99.99).unwrap();
        assert!(
            (l - rl).abs() <= tol && (hi - rh).abs() <= tol,
            "{name} percentile ({l}, {hi}) vs ({rl}, {rh}), tol {tol}"
        );

        let (rl, rh) = pair(&r["entropy_2048_128"]);
        let (l, hi) = select::entropy(&h, 128).unwrap();
        let ours = select::entropy_divergence(&h, 128, l.abs().max(hi.abs()) as f64).unwrap();
        let theirs = select::entropy_divergence(&h, 128, rl.abs().max(rh.abs()) as f64).unwrap();
        assert!(
            ours <= theirs,
            "{name}: entropy ({l}, {hi}) KL {ours} vs onnxruntime ({rl}, {rh}) KL {theirs}"
        );
    }
}
