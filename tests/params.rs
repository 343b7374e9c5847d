//! quant-params: the reference vectors (onnxruntime's own code, and the MLIR algorithm), the
//! vectors of notes §2.8 for PyTorch, the MLIR type strings through melior, and the laws of
//! quantize/dequantize as property tests.

mod common;

use ndarray::{ArrayD, IxDyn};
use proptest::prelude::*;
use quantir::params::*;
use quantir::tensor::Tensor;

#[derive(serde::Deserialize)]
struct Case {
    scheme: String,
    min: f64,
    max: f64,
    dtype: String,
    flags: std::collections::BTreeMap<String, bool>,
    scale: f64,
    zero_point: i64,
    qmin: i64,
    qmax: i64,
}

fn opts(flags: &std::collections::BTreeMap<String, bool>) -> RangeOptions {
    let f = |k: &str| flags.get(k).copied().unwrap_or(false);
    RangeOptions {
        symmetric: f("symmetric"),
        narrow_range: f("narrow_range"),
        reduce_range: f("reduce_range"),
        ..Default::default()
    }
}

#[test]
fn reproduces_every_reference_vector() {
    #[derive(serde::Deserialize)]
    struct File {
        cases: Vec<Case>,
    }
    let text = std::fs::read_to_string(common::data("params_vectors.json")).unwrap();
    let file: File = serde_json::from_str(&text).unwrap();
    assert!(file.cases.len() >= 200);
    for (i, c) in file.cases.iter().enumerate() {
        let scheme: Scheme = c.scheme.parse().unwrap();
        let dtype: StorageType = c.dtype.parse().unwrap();
        let p = compute(scheme, dtype, c.min, c.max, &opts(&c.flags)).unwrap_or_else(|e| panic!("case {i}: {e}"));
        let ctx = format!(
            "case {i}: {} {} [{}, {}] {:?}",
            c.scheme, c.dtype, c.min, c.max, c.flags
        );
        assert_eq!(p.zero_point[0], c.zero_point, "{ctx}");
        assert_eq!((p.qmin, p.qmax), (c.qmin, c.qmax), "{ctx}");
        assert!(
            ((p.scale[0] - c.scale) / c.scale).abs() <= 1e-6,
            "{ctx}: scale {} vs {}",
            p.scale[0],
            c.scale
        );
    }
}

/// (scheme, dtype, min, max, options, scale, zero point) from notes/reference-algorithms.md §2.8.
#[test]
fn derived_vectors_of_each_scheme() {
    let none = RangeOptions::default();
    let sym = RangeOptions {
        symmetric: true,
        ..none
    };
    let narrow = RangeOptions {
        narrow_range: true,
        ..none
    };
    let reduce = RangeOptions {
        reduce_range: true,
        ..none
    };
    use Scheme::*;
    use StorageType::*;
    let cases: Vec<(Scheme, StorageType, f64, f64, RangeOptions, f64, i64)> = vec![
        (Mlir, Int8, -1.0, 1.0, none, 2.0 / 255.0, -1),
        (Mlir, Int8, 0.5, 2.0, none, 1.5 / 255.0, -128),
        (Mlir, Int8, -2.0, -0.5, none, 1.5 / 255.0, 127),
        (Mlir, Int8, 0.0, 0.0, none, 1.0, -128),
        (Mlir, Int8, -128.5, 126.5, none, 1.0, 1),
        (Mlir, Int8, -1.0, 1.0, narrow, 2.0 / 254.0, 0),
        (Mlir, Uint8, -128.5, 126.5, none, 1.0, 129),
        (Mlir, Uint8, -1.0, 1.0, none, 2.0 / 255.0, 128),
        (Mlir, Int8, -0.3, 0.7, none, 1.0 / 255.0, -52),
        (Mlir, Int16, -1.0, 1.0, none, 2.0 / 65535.0, -1),
        (Onnx, Int8, -1.0, 1.0, none, 0.007843137719, 0),
        (Onnx, Int8, 0.0, 0.0, none, 1.0, 0),
        (Onnx, Int8, -128.5, 126.5, none, 1.0, 0),
        (Onnx, Uint8, -128.5, 126.5, none, 1.0, 128),
        (Onnx, Int8, -0.3, 0.7, sym, 0.005511811003, 0),
        // onnxruntime 1.32 has no symmetric uint8 range: [0, 255], zero point round(127.5) = 128
        (Onnx, Uint8, -0.3, 0.7, sym, 0.005490195937, 128),
        (Onnx, Int8, -0.3, 0.7, reduce, 0.0078125, -26),
        (Onnx, Int16, 0.0, 6.0, none, 9.155413136e-05, -32768),
        (Onnx, Int4, -1.0, 1.0, none, 0.1333333403, 0),
        (
            Onnx,
            Int8,
            -1.0,
            1.0,
            RangeOptions {
                symmetric: true,
                reduce_range: true,
                ..none
            },
            0.015625,
            0,
        ),
        (
            Onnx,
            Int8,
            0.0,
            0.0,
            RangeOptions {
                min_real_range: Some(1e-4),
                ..none
            },
            3.921568634e-07,
            -128,
        ),
        (Torch, Uint8, -1.0, 1.0, none, 0.007843137719, 127),
        (Torch, Int8, -1.0, 1.0, none, 0.007843137719, -1),
        (Torch, Uint8, -0.5, 2.0, none, 0.009803921916, 51),
        (Torch, Int8, 0.0, 0.0, none, f32::EPSILON as f64, -128),
        (Torch, Uint8, 0.0, 0.0, none, f32::EPSILON as f64, 0),
        (Torch, Int8, -128.5, 126.5, none, 1.0, 0),
        (Torch, Uint8, -128.5, 126.5, none, 1.0, 128),
        (Torch, Uint8, -0.3, 0.7, none, 0.003921568859, 76),
        (Torch, Int8, -0.3, 0.7, none, 0.003921568859, -52),
        (Torch, Int8, -0.3, 0.7, sym, 0.005490195937, 0),
        (Torch, Uint8, -0.3, 0.7, sym, 0.005490195937, 128),
        (Torch, Uint8, -0.3, 0.7, reduce, 0.007874015719, 38),
        (
            Torch,
            Int8,
            -1.0,
            1.0,
            RangeOptions {
                symmetric: true,
                narrow_range: true,
                eps: Some(1.0 / 4096.0),
                ..none
            },
            0.007874015719,
            0,
        ),
    ];
    for (scheme, dtype, min, max, o, scale, zp) in cases {
        let p = compute(scheme, dtype, min, max, &o).unwrap();
        let what = format!("{scheme} {dtype} [{min}, {max}] {o:?}");
        assert_eq!(p.zero_point[0], zp, "{what}");
        assert!(
            ((p.scale[0] - scale) / scale).abs() < 1e-8,
            "{what}: scale {} vs {scale}",
            p.scale[0]
        );
    }
    // per-axis, MLIR narrow signed: a degenerate channel gets (1.0, qmin)
    let p = compute_per_axis(Mlir, Int8, &[-1.0, 0.0, 0.5, -6.0], &[1.0, 0.0, 2.0, 2.0], 3, &narrow).unwrap();
    assert_eq!(p.zero_point, vec![0, -127, -127, 64]);
    let want = [2.0 / 254.0, 1.0, 1.5 / 254.0, 8.0 / 254.0];
    for (s, w) in p.scale.iter().zip(want) {
        assert!((s - w).abs() < 1e-15);
    }
}

#[test]
fn schemes_reject_what_they_do_not_define() {
    use Scheme::*;
    use StorageType::*;
    let sym = RangeOptions {
        symmetric: true,
        ..Default::default()
    };
    assert!(matches!(
        compute(Mlir, Int8, -1.0, 1.0, &sym),
        Err(ParamsError::Unsupported { .. })
    ));
    assert!(matches!(
        compute(
            Mlir,
            Int8,
            -1.0,
            1.0,
            &RangeOptions {
                reduce_range: true,
                ..Default::default()
            }
        ),
        Err(ParamsError::Unsupported { .. })
    ));
    assert!(matches!(
        compute(Onnx, Int32, -1.0, 1.0, &Default::default()),
        Err(ParamsError::Unsupported { .. })
    ));
    assert!(matches!(
        compute(Onnx, Int8, 2.0, 1.0, &Default::default()),
        Err(ParamsError::MinAboveMax { .. })
    ));
    assert!(matches!(
        compute(Torch, Int8, f64::NAN, 1.0, &Default::default()),
        Err(ParamsError::NonFinite { .. })
    ));
    assert!(matches!(
        compute(Mlir, Int8, -1.0, f64::INFINITY, &Default::default()),
        Err(ParamsError::NonFinite { .. })
    ));
    // PyTorch gives a symmetric reduced uint8 range the zero point 128, outside [0, 127]
    let r = compute(
        Torch,
        Uint8,
        -1.0,
        1.0,
        &RangeOptions {
            symmetric: true,
            reduce_range: true,
            ..Default::default()
        },
    );
    assert!(
        matches!(r, Err(ParamsError::ZeroPointOutOfRange { zero_point: 128, .. })),
        "{r:?}"
    );
    let e = compute_per_axis(Mlir, Int8, &[0.0, 1.0], &[1.0, 0.5], 0, &Default::default()).unwrap_err();
    assert_eq!(e.to_string(), "min 1 is greater than max 0.5 (channel 1)");
}

#[test]
fn mlir_type_strings_round_trip_through_melior() {
    let ctx = quantir::ir::new_context();
    let narrow = RangeOptions {
        narrow_range: true,
        symmetric: true,
        ..Default::default()
    };
    let all = [
        compute(Scheme::Mlir, StorageType::Int8, 0.0, 6.0, &Default::default()).unwrap(),
        compute(Scheme::Onnx, StorageType::Uint8, -0.3, 0.7, &Default::default()).unwrap(),
        compute(Scheme::Onnx, StorageType::Int4, -1.0, 1.0, &Default::default()).unwrap(),
        compute(Scheme::Mlir, StorageType::Int16, -1.0, 1.0, &Default::default()).unwrap(),
        compute_per_axis(
            Scheme::Mlir,
            StorageType::Int8,
            &[-1.0, -0.2, 0.0],
            &[0.5, 0.4, 0.0],
            3,
            &narrow,
        )
        .unwrap(),
    ];
    for p in all {
        let s = p.mlir_type();
        let back = quantir::ir::quant::params_from_type_str(&ctx, &s, p.scheme).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(back, p, "{s}");
    }
    assert_eq!(
        compute(Scheme::Mlir, StorageType::Int8, 0.0, 6.0, &Default::default())
            .unwrap()
            .mlir_type(),
        "!quant.uniform<i8:f32, 2.3529411764705882e-2:-128>"
    );
    assert!(all_narrow_prints_bounds());
}

fn all_narrow_prints_bounds() -> bool {
    let narrow = RangeOptions {
        narrow_range: true,
        ..Default::default()
    };
    compute(Scheme::Mlir, StorageType::Int8, -1.0, 1.0, &narrow)
        .unwrap()
        .mlir_type()
        .starts_with("!quant.uniform<i8<-127:127>:f32, ")
}

#[test]
fn rounding_modes_at_ties_and_saturation() {
    // notes §2.9: scale 1, zero point 0, int8
    let x = ArrayD::from_shape_vec(
        IxDyn(&[10]),
        vec![0.5f32, 1.5, 2.5, -0.5, -1.5, 0.9, -0.9, 127.6, 200.0, -200.0],
    )
    .unwrap();
    let p = QuantParams {
        scheme: Scheme::Onnx,
        dtype: StorageType::Int8,
        scale: vec![1.0],
        zero_point: vec![0],
        axis: None,
        qmin: -128,
        qmax: 127,
    };
    let even = quantize(&x.view(), &p, Rounding::HalfEven).unwrap();
    let away = quantize(&x.view(), &p, Rounding::HalfAway).unwrap();
    let as_vec = |t: Tensor| match t {
        Tensor::I8(a) => a.iter().copied().collect::<Vec<i8>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(as_vec(even), vec![0, 2, 2, 0, -2, 1, -1, 127, 127, -128]);
    assert_eq!(as_vec(away), vec![1, 2, 3, -1, -2, 1, -1, 127, 127, -128]);
}

#[test]
fn per_axis_quantize_dequantize_and_half() {
    let x = ArrayD::from_shape_vec(IxDyn(&[2, 2, 3]), (0..12).map(|i| i as f32 * 0.25 - 1.0).collect()).unwrap();
    let p = compute_per_axis(
        Scheme::Onnx,
        StorageType::Int8,
        &[-1.0, -0.5, -0.1],
        &[1.0, 2.0, 0.3],
        2,
        &Default::default(),
    )
    .unwrap();
    let q = quantize(&x.view(), &p, Rounding::HalfEven).unwrap();
    let d = dequantize(&q, &p).unwrap();
    let fq = fake_quant(&x.view(), &p, Rounding::HalfEven).unwrap();
    assert_eq!(d, fq);
    // channel c of the last axis uses its own parameters
    for (idx, &v) in x.indexed_iter() {
        let c = idx[2];
        let single = QuantParams {
            scale: vec![p.scale[c]],
            zero_point: vec![p.zero_point[c]],
            axis: None,
            ..p.clone()
        };
        let one = ArrayD::from_elem(IxDyn(&[1]), v);
        assert_eq!(
            fake_quant(&one.view(), &single, Rounding::HalfEven).unwrap()[[0]],
            fq[&idx]
        );
    }
    let wrong = compute_per_axis(
        Scheme::Onnx,
        StorageType::Int8,
        &[-1.0, -1.0],
        &[1.0, 1.0],
        2,
        &Default::default(),
    )
    .unwrap();
    assert!(quantize(&x.view(), &wrong, Rounding::HalfEven).is_err());
    let h = to_f16(&ArrayD::from_elem(IxDyn(&[2]), 0.1f32).view());
    assert_eq!(h[[0]].to_bits(), 0x2e66);
    assert_eq!(
        to_f16(&ArrayD::from_elem(IxDyn(&[1]), 70000.0f32).view())[[0]],
        half::f16::INFINITY
    );
    assert_eq!(
        to_bf16(&ArrayD::from_elem(IxDyn(&[1]), 0.1f32).view())[[0]].to_f32(),
        0.100_097_656
    );
}

fn any_scheme_dtype() -> impl Strategy<Value = (Scheme, StorageType, RangeOptions)> {
    prop_oneof![
        Just((Scheme::Mlir, StorageType::Int8, RangeOptions::default())),
        Just((Scheme::Mlir, StorageType::Uint8, RangeOptions::default())),
        Just((
            Scheme::Mlir,
            StorageType::Int8,
            RangeOptions {
                narrow_range: true,
                symmetric: true,
                ..Default::default()
            }
        )),
        Just((Scheme::Mlir, StorageType::Int16, RangeOptions::default())),
        Just((Scheme::Onnx, StorageType::Int8, RangeOptions::default())),
        Just((Scheme::Onnx, StorageType::Uint8, RangeOptions::default())),
        Just((
            Scheme::Onnx,
            StorageType::Int8,
            RangeOptions {
                symmetric: true,
                ..Default::default()
            }
        )),
        Just((Scheme::Onnx, StorageType::Int4, RangeOptions::default())),
        Just((Scheme::Onnx, StorageType::Uint16, RangeOptions::default())),
        Just((Scheme::Torch, StorageType::Int8, RangeOptions::default())),
        Just((
            Scheme::Torch,
            StorageType::Uint8,
            RangeOptions {
                reduce_range: true,
                ..Default::default()
            }
        )),
    ]
}

proptest! {
    /// For x inside the representable range, |x - dq(q(x))| <= scale/2 (+ f32 rounding).
    #[test]
    fn round_trip_error_is_at_most_half_a_step(
        (scheme, dtype, o) in any_scheme_dtype(),
        a in -100.0f64..100.0, w in 1e-3f64..200.0, t in 0.0f64..1.0,
    ) {
        let (min, max) = (a as f32 as f64, (a + w) as f32 as f64);
        let p = compute(scheme, dtype, min, max, &o).unwrap();
        let (s, z) = (p.scale[0], p.zero_point[0] as f64);
        // the representable range of these parameters
        let lo = (p.qmin as f64 - z) * s;
        let hi = (p.qmax as f64 - z) * s;
        let x = (lo + t * (hi - lo)) as f32;
        prop_assume!((x as f64) >= lo && (x as f64) <= hi);
        let xs = ArrayD::from_elem(IxDyn(&[1]), x);
        let fq = fake_quant(&xs.view(), &p, Rounding::HalfEven).unwrap()[[0]];
        let tol = s / 2.0 + (x.abs() as f64 + hi.abs()) * 4.0 * f32::EPSILON as f64;
        prop_assert!(((x - fq) as f64).abs() <= tol, "x {} fq {} scale {}", x, fq, s);
    }

    /// Schemes that widen the range to contain 0 represent 0.0 exactly.
    #[test]
    fn zero_is_exact_when_the_range_is_widened(
        (scheme, dtype, o) in any_scheme_dtype(), a in -50.0f64..50.0, w in 0.0f64..100.0,
    ) {
        prop_assume!(scheme != Scheme::Mlir || (a <= 0.0 && a + w >= 0.0));
        let p = compute(scheme, dtype, a, a + w, &o).unwrap();
        let zero = ArrayD::from_elem(IxDyn(&[1]), 0.0f32);
        prop_assert_eq!(fake_quant(&zero.view(), &p, Rounding::HalfEven).unwrap()[[0]], 0.0);
    }

    /// Per-axis equals per-tensor applied channel by channel.
    #[test]
    fn per_axis_is_per_tensor_per_channel(
        ranges in proptest::collection::vec((-10.0f64..0.0, 0.0f64..10.0), 1..6),
        vals in proptest::collection::vec(-12.0f32..12.0, 6 * 4),
    ) {
        let c = ranges.len();
        let mins: Vec<f64> = ranges.iter().map(|r| r.0).collect();
        let maxs: Vec<f64> = ranges.iter().map(|r| r.1).collect();
        let x = ArrayD::from_shape_vec(IxDyn(&[4, c]), vals[..4 * c].to_vec()).unwrap();
        for scheme in [Scheme::Mlir, Scheme::Onnx, Scheme::Torch] {
            let pa = compute_per_axis(scheme, StorageType::Int8, &mins, &maxs, 1, &Default::default()).unwrap();
            let fq = fake_quant(&x.view(), &pa, Rounding::HalfEven).unwrap();
            for ch in 0..c {
                let pt = compute(scheme, StorageType::Int8, mins[ch], maxs[ch], &Default::default()).unwrap();
                prop_assert_eq!(pt.scale[0], pa.scale[ch]);
                prop_assert_eq!(pt.zero_point[0], pa.zero_point[ch]);
                let col = x.index_axis(ndarray::Axis(1), ch).to_owned().into_dyn();
                let fq_col = fake_quant(&col.view(), &pt, Rounding::HalfEven).unwrap();
                prop_assert_eq!(fq_col, fq.index_axis(ndarray::Axis(1), ch).to_owned().into_dyn());
            }
        }
    }
}
