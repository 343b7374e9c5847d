//! Streaming laws: statistics do not depend on batching, sharding or merge order; memory does
//! not grow with the data; non-finite values are errors that name the tensor and sample.

mod common;
use common::Rng;
use ndarray::{ArrayD, ArrayViewD, IxDyn};
use proptest::prelude::*;
use quantir_calibration::*;

fn view(xs: &[f32]) -> ArrayViewD<'_, f32> {
    ArrayViewD::from_shape(IxDyn(&[xs.len()]), xs).unwrap()
}

fn methods() -> Vec<Method> {
    vec![
        Method::MinMax,
        Method::Percentile {
            percentile: 99.9,
            symmetric: false,
        },
        Method::Percentile {
            percentile: 99.9,
            symmetric: true,
        },
        Method::Entropy { levels: 128 },
        Method::Mse {
            bits: 8,
            symmetric: false,
        },
    ]
}

fn stats_of(chunks: &[&[f32]], method: Method) -> StatsFile {
    let mut s = StatsFile::new("model", method, 2048, NonFinitePolicy::Error);
    for (i, c) in chunks.iter().enumerate() {
        s.observe("t", i, &view(c), None).unwrap();
        s.num_samples += 1;
    }
    s.finalize().unwrap();
    s
}

/// Everything but bookkeeping that legitimately counts batches.
fn essence(s: &StatsFile) -> String {
    let t = &s.tensors["t"];
    let state = serde_json::to_string(&t.observer.state).unwrap();
    format!(
        "{:?} {:?} {:?} {state}",
        t.min.to_bits(),
        t.max.to_bits(),
        (t.range.0.to_bits(), t.range.1.to_bits())
    )
}

#[test]
fn one_batch_many_batches_and_shards_in_any_order_are_bit_identical() {
    let mut r = Rng::new(7);
    let xs = r.vec(200_000, |r| r.laplace(0.7) + 0.3);
    for m in methods() {
        let whole = stats_of(&[&xs], m);
        let batches: Vec<&[f32]> = xs.chunks(1000).collect();
        let many = stats_of(&batches, m);
        assert_eq!(essence(&whole), essence(&many), "{m:?}: one batch vs 200");
        // three shards (every 3rd batch), merged in every order
        let shards: Vec<StatsFile> = (0..3)
            .map(|k| stats_of(&batches.iter().copied().skip(k).step_by(3).collect::<Vec<_>>(), m))
            .collect();
        for order in [[0, 1, 2], [2, 1, 0], [1, 2, 0]] {
            let mut merged = shards[order[0]].clone();
            merged.merge(&shards[order[1]]).unwrap();
            merged.merge(&shards[order[2]]).unwrap();
            assert_eq!(essence(&merged), essence(&whole), "{m:?}: shards merged as {order:?}");
            assert_eq!(merged.num_samples, 200);
        }
    }
}

#[test]
fn histogram_state_does_not_grow_with_the_number_of_batches() {
    // 10,000 batches of 100,000 values; the range keeps widening so the grid keeps coarsening
    let mut r = Rng::new(8);
    let base = r.vec(100_000, |r| r.normal());
    let mut buf = base.clone();
    let mut o = Observer::new(Method::Entropy { levels: 128 }, 2048, NonFinitePolicy::Error);
    o.observe(&view(&base)).unwrap();
    // at most 2·bins counters plus a fixed header, whatever has been observed
    let bound = std::mem::size_of::<Observer>() + std::mem::size_of::<Histogram>() + 2 * 2048 * 8;
    let mut largest = o.state_bytes();
    for i in 0..10_000u32 {
        let scale = 1.0 + (i % 97) as f32 * 0.25 + (i / 1000) as f32;
        for (b, x) in buf.iter_mut().zip(&base) {
            *b = x * scale;
        }
        o.observe(&view(&buf)).unwrap();
        largest = largest.max(o.state_bytes());
    }
    assert!(largest <= bound, "state reached {largest} bytes, bound {bound}");
    match &o.state {
        State::Histogram(h) => assert_eq!(h.count, 100_000 * 10_001),
        _ => unreachable!(),
    }
}

#[test]
fn non_finite_values_are_errors_naming_tensor_and_sample_or_are_skipped_and_counted() {
    let mut xs = vec![1.0f32; 100];
    xs[42] = f32::NAN;
    xs[77] = f32::NEG_INFINITY;
    for m in methods() {
        let mut s = StatsFile::new("h", m, 2048, NonFinitePolicy::Error);
        s.observe("conv1/Relu", 0, &view(&[0.5, 2.0]), None).unwrap();
        let before = s.clone();
        let e = s.observe("conv1/Relu", 3, &view(&xs), None).unwrap_err();
        assert_eq!(
            e,
            CalibError::NonFinite {
                key: "conv1/Relu".into(),
                sample: 3,
                count: 2,
                first_index: 42
            }
        );
        assert!(
            e.to_string()
                .starts_with("tensor 'conv1/Relu', sample 3: 2 non-finite value(s)"),
            "{e}"
        );
        assert_eq!(s, before, "a rejected batch records nothing");
        let mut s = StatsFile::new("h", m, 2048, NonFinitePolicy::Skip);
        s.observe("t", 0, &view(&xs), None).unwrap();
        s.finalize().unwrap();
        assert_eq!(s.tensors["t"].observer.skipped_non_finite, 2);
        assert_eq!((s.tensors["t"].min, s.tensors["t"].max), (1.0, 1.0));
    }
    let mut s = StatsFile::new("h", Method::MinMax, 2048, NonFinitePolicy::Skip);
    s.observe("all_nan", 0, &view(&[f32::NAN; 4]), None).unwrap();
    assert_eq!(s.finalize().unwrap_err(), CalibError::Empty { key: "all_nan".into() });
}

#[test]
fn stats_file_round_trips_and_refuses_mismatches() {
    let mut s = stats_of(
        &[&[0.0, 1.0, -2.0]],
        Method::Percentile {
            percentile: 99.0,
            symmetric: false,
        },
    );
    let w = ArrayD::from_shape_vec(IxDyn(&[2, 3]), vec![1.0f32, -1.0, 2.0, 0.5, 4.0, -3.0]).unwrap();
    s.observe("weight", 0, &w.view(), Some(1)).unwrap();
    s.finalize().unwrap();
    assert_eq!(s.tensors["weight"].channel_min, Some(vec![0.5, -1.0, -3.0]));
    assert_eq!(s.tensors["weight"].channel_max, Some(vec![1.0, 4.0, 2.0]));
    let text = s.to_json().unwrap();
    assert_eq!(StatsFile::from_json(&text).unwrap(), s);
    // an older version (1: FNV-1a model hashes) and a newer one are refused, naming theirs
    let current = format!("\"format_version\": {FORMAT_VERSION}");
    assert!(text.contains(&current), "{text}");
    for other in [1, FORMAT_VERSION + 1] {
        let t = text.replacen(&current, &format!("\"format_version\": {other}"), 1);
        assert!(StatsFile::from_json(&t)
            .unwrap_err()
            .to_string()
            .contains(&format!("format_version {other} is not supported")));
    }
    assert!(StatsFile::from_json("{}")
        .unwrap_err()
        .to_string()
        .contains("no format_version"));
    assert!(s.check_model("other").is_err());
    let mut other = s.clone();
    other.model_hash = "different".into();
    assert!(s
        .clone()
        .merge(&other)
        .unwrap_err()
        .to_string()
        .contains("model (model_hash) differs"));
    let mm = stats_of(&[&[0.0]], Method::MinMax);
    let mut mm2 = mm.clone();
    let e = mm2.merge(&s).unwrap_err().to_string();
    assert!(e.contains("method differs"), "{e}");
    let ema = Observer::new(Method::EmaMinMax { constant: 0.01 }, 0, NonFinitePolicy::Error);
    assert!(ema.clone().merge(&ema).is_err());
}

proptest! {
    /// Histogram merge is associative and commutative, and equals observing everything at once.
    #[test]
    fn histogram_merge_laws(
        a in proptest::collection::vec(-1e3f32..1e3, 1..300),
        b in proptest::collection::vec(-10f32..10.0, 1..300),
        c in proptest::collection::vec(0f32..1e5, 1..300),
        bins in 8usize..600,
    ) {
        let h = |xs: &[f32]| { let mut h = Histogram::new(bins); h.observe_slice(xs); h };
        let (ha, hb, hc) = (h(&a), h(&b), h(&c));
        let mut left = ha.clone(); left.merge(&hb).unwrap(); left.merge(&hc).unwrap();
        let mut bc = hb.clone(); bc.merge(&hc).unwrap();
        let mut right = ha.clone(); right.merge(&bc).unwrap();
        let mut swapped = hc.clone(); swapped.merge(&ha).unwrap(); swapped.merge(&hb).unwrap();
        let all: Vec<f32> = a.iter().chain(&b).chain(&c).copied().collect();
        prop_assert_eq!(&left, &right);
        prop_assert_eq!(&left, &swapped);
        prop_assert_eq!(&left, &h(&all));
        prop_assert!(left.counts.len() <= 2 * bins);
    }
}
