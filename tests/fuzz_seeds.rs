//! The fuzz targets of `quantir::fuzzing` on the stable toolchain: each runs over its seed
//! corpus (the bundled models and data, or small files made here) and deterministic
//! mutations of every seed — truncations, byte overwrites, insertions. A target must return on
//! each (an error is fine); a panic fails the test, an abort kills it. libFuzzer runs the same
//! functions far longer from `fuzz/` (nightly).

mod common;

use common::{arg, data, example, ok, quantir};
use quantir::fuzzing::TARGETS;
use std::collections::HashMap;

/// xorshift64*: deterministic mutations, the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// The seed itself, 7 truncations, 24 single-byte overwrites, 8 insertions of a few bytes and
/// 4 interesting-value overwrites (0x00, 0xFF, 0x7F, 0x80 runs).
fn mutations(seed: &[u8], rng: &mut Rng) -> Vec<Vec<u8>> {
    let mut out = vec![seed.to_vec()];
    for k in 0..7 {
        out.push(seed[..seed.len() * k / 7].to_vec());
    }
    for _ in 0..24 {
        let mut m = seed.to_vec();
        if !m.is_empty() {
            let at = rng.below(m.len());
            m[at] = rng.next() as u8;
        }
        out.push(m);
    }
    for _ in 0..8 {
        let mut m = seed.to_vec();
        let at = rng.below(m.len() + 1);
        let n = 1 + rng.below(8);
        let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
        m.splice(at..at, bytes);
        out.push(m);
    }
    for v in [0x00u8, 0xFF, 0x7F, 0x80] {
        let mut m = seed.to_vec();
        if !m.is_empty() {
            let at = rng.below(m.len());
            let end = (at + 8).min(m.len());
            m[at..end].fill(v);
        }
        out.push(m);
    }
    out
}

fn npy_bytes(dir: &std::path::Path) -> Vec<u8> {
    let p = dir.join("a.npy");
    let a = ndarray::ArrayD::from_shape_vec(vec![3, 2, 2], (0..12).map(|v| v as f32 * 0.5).collect()).unwrap();
    ndarray_npy::write_npy(&p, &a).unwrap();
    std::fs::read(p).unwrap()
}

fn npz_bytes(dir: &std::path::Path) -> Vec<u8> {
    let p = dir.join("a.npz");
    let mut w = ndarray_npy::NpzWriter::new(std::fs::File::create(&p).unwrap());
    let a = ndarray::ArrayD::from_shape_vec(vec![2, 3], vec![1i64, 2, 3, 4, 5, 6]).unwrap();
    let b = ndarray::ArrayD::from_shape_vec(vec![2, 2], vec![0.25f32, -1.0, 3.5, 8.0]).unwrap();
    w.add_array("x", &a).unwrap();
    w.add_array("y", &b).unwrap();
    w.finish().unwrap();
    std::fs::read(p).unwrap()
}

fn png_bytes(dir: &std::path::Path) -> Vec<u8> {
    let p = dir.join("a.png");
    let img = image::RgbImage::from_fn(8, 8, |x, y| image::Rgb([(x * 30) as u8, (y * 30) as u8, 128]));
    img.save(&p).unwrap();
    std::fs::read(p).unwrap()
}

/// The seeds of each target.
fn corpora(dir: &std::path::Path) -> HashMap<&'static str, Vec<Vec<u8>>> {
    let read = |p: std::path::PathBuf| std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let stats = dir.join("s.json");
    ok(quantir(&[
        "calibrate",
        &arg(&example("digits_cnn.mlir")),
        "--data",
        &arg(&example("digits_calib.npz")),
        "--limit",
        "4",
        "-o",
        &arg(&stats),
    ]));
    let bytecode = dir.join("m.mlirbc");
    ok(quantir(&["opt", &arg(&data("digits_mlp.mlir")), "-o", &arg(&bytecode)]));
    let recipe = b"weights = \"int8\"\nactivations = \"int8\"\nscheme = \"onnx\"\nexclude = [\"*Softmax*\"]\n\n[[override]]\nmatch = \"tf.MatMul\"\nactivations = \"int16\"\nmethod = \"percentile\"\n".to_vec();
    HashMap::from([
        ("image", vec![png_bytes(dir)]),
        ("mlir", vec![read(data("digits_mlp.mlir"))]),
        ("mlir_bytecode", vec![read(bytecode)]),
        ("npy", vec![npy_bytes(dir)]),
        ("npz", vec![npz_bytes(dir)]),
        (
            "onnx_model",
            vec![read(data("digits_mlp.onnx")), read(data("digits_cnn.onnx"))],
        ),
        ("recipe_toml", vec![recipe]),
        (
            "saved_model_pb",
            vec![read(data("digits_mlp_savedmodel/saved_model.pb"))],
        ),
        ("stats_json", vec![read(stats)]),
        (
            "variables_bundle",
            vec![quantir::fuzzing::bundle_input(
                &read(data("digits_mlp_savedmodel/variables/variables.index")),
                &read(data("digits_mlp_savedmodel/variables/variables.data-00000-of-00001")),
            )],
        ),
        (
            "variables_index",
            vec![read(data("digits_mlp_savedmodel/variables/variables.index"))],
        ),
    ])
}

#[test]
fn every_fuzz_target_survives_its_seeds_and_their_mutations() {
    let dir = tempfile::tempdir().unwrap();
    let corpora = corpora(dir.path());
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for (name, target) in TARGETS {
        let seeds = corpora
            .get(name)
            .unwrap_or_else(|| panic!("no seed corpus for fuzz target {name}"));
        for (i, seed) in seeds.iter().enumerate() {
            // a seed the parser refuses would test only its first check
            assert!(target(seed), "fuzz target {name}: seed {i} is not accepted");
            for m in mutations(seed, &mut rng) {
                target(&m);
            }
        }
    }
    // every seed corpus belongs to a target
    for name in corpora.keys() {
        assert!(
            TARGETS.iter().any(|(t, _)| t == name),
            "seeds for unknown target {name}"
        );
    }
}

/// `fuzz/` has one libFuzzer target per entry of `TARGETS`, each calling that function, and
/// its Cargo.toml names them all.
#[test]
fn the_libfuzzer_targets_match_the_table() {
    let root = common::root().join("fuzz");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    for (name, _) in TARGETS {
        let path = root.join(format!("fuzz_targets/{name}.rs"));
        let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            src.contains(&format!("quantir::fuzzing::{name}(data)")),
            "{}",
            path.display()
        );
        assert!(
            manifest.contains(&format!("name = \"{name}\"")),
            "fuzz/Cargo.toml lacks {name}"
        );
    }
    let files = std::fs::read_dir(root.join("fuzz_targets")).unwrap().count();
    assert_eq!(
        files,
        TARGETS.len(),
        "fuzz/fuzz_targets has targets quantir::fuzzing does not list"
    );
}

/// Every input libFuzzer found crashing a target (`tests/data/fuzz_crashes/TARGET/*`, kept as
/// found) now gives an error: the target returns, refusing it.
#[test]
fn inputs_that_once_crashed_a_target_are_refused() {
    let root = data("fuzz_crashes");
    let mut n = 0;
    for dir in std::fs::read_dir(&root).unwrap() {
        let dir = dir.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let (_, target) = TARGETS
            .iter()
            .find(|(t, _)| *t == name)
            .unwrap_or_else(|| panic!("{}: no fuzz target {name}", dir.display()));
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap().path();
            assert!(!target(&std::fs::read(&f).unwrap()), "{}: accepted", f.display());
            n += 1;
        }
    }
    assert!(n > 0, "no crash inputs under {}", root.display());
}
