//! The front ends' jobs (`quantir::jobs`): a calibration stream gives the statistics of the
//! same samples in a data set, byte for byte, whatever the items' batching, shard and limit.

use quantir::formats::data::Dataset;
use quantir::jobs::{self, CalibFlags, Item, Samples};
use quantir::tensor::Tensor;
use std::path::Path;

const MODEL: &str = "examples/digits_cnn.mlir";
const CALIB: &str = "examples/digits_calib.npz";

fn stats_json(samples: Samples, flags: &CalibFlags) -> String {
    let ctx = quantir::ir::new_context();
    let module = jobs::load(&ctx, Path::new(MODEL), None).unwrap();
    let opts = jobs::calibrate_options(flags, &Default::default(), None).unwrap();
    let c = jobs::calibrate(&module, samples, flags, &opts, None).unwrap();
    c.stats.to_json().unwrap()
}

/// The calibration array as items of `size` samples each (a size of 0: single samples
/// without the sample axis, as a generator of one sample per item gives them).
fn items(size: usize) -> Vec<Item> {
    let d = Dataset::open(Path::new(CALIB)).unwrap();
    let Tensor::F32(x) = d.load("x").unwrap().unwrap() else {
        panic!("x is f32")
    };
    let n = x.shape()[0];
    if size == 0 {
        return (0..n)
            .map(|i| {
                Ok(vec![(
                    "x".to_string(),
                    Tensor::F32(x.index_axis(ndarray::Axis(0), i).to_owned()),
                )])
            })
            .collect();
    }
    (0..n)
        .step_by(size)
        .map(|i| {
            let part = x.slice_axis(ndarray::Axis(0), ndarray::Slice::from(i..(i + size).min(n)));
            Ok(vec![("x".to_string(), Tensor::F32(part.to_owned()))])
        })
        .collect()
}

#[test]
fn a_stream_calibrates_as_its_data_set_does() {
    let data = Dataset::open(Path::new(CALIB)).unwrap();
    for method in ["minmax", "percentile", "entropy", "ema-minmax"] {
        for (limit, shard) in [
            (None, None),
            (Some(50), None),
            (None, Some((1, 3))),
            (Some(90), Some((0, 4))),
        ] {
            let flags = CalibFlags {
                method: Some(method.into()),
                limit,
                shard,
                ..Default::default()
            };
            let want = stats_json(Samples::Data(&data), &flags);
            for size in [0, 1, 7, 64] {
                let mut stream = items(size).into_iter();
                let got = stats_json(Samples::Stream(&mut stream), &flags);
                assert!(got == want, "{method} limit {limit:?} shard {shard:?}, items of {size}");
            }
        }
    }
}

#[test]
fn a_bad_item_is_named() {
    let mut stream = items(0).into_iter().take(3).chain(std::iter::once(Ok(vec![(
        "x".to_string(),
        Tensor::F64(ndarray::ArrayD::zeros(ndarray::IxDyn(&[8, 8, 1]))),
    )])));
    let ctx = quantir::ir::new_context();
    let module = jobs::load(&ctx, Path::new(MODEL), None).unwrap();
    let flags = CalibFlags::default();
    let opts = jobs::calibrate_options(&flags, &Default::default(), None).unwrap();
    let e = jobs::calibrate(&module, Samples::Stream(&mut stream), &flags, &opts, None).unwrap_err();
    let msg = quantir::text::one_line(&e);
    assert!(msg.contains("calibration item 3") && msg.contains("f64"), "{msg}");
    let mut empty = std::iter::empty();
    let e = jobs::calibrate(&module, Samples::Stream(&mut empty), &flags, &opts, None).unwrap_err();
    assert_eq!(quantir::text::one_line(&e), "no samples to calibrate on");
}
