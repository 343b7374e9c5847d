//! The TensorBundle reader (SavedModel variables): the shared digits CNN's checkpoint against
//! the constants of its frozen MLIR export, a hand-built bundle, and corrupted or missing
//! files.

mod common;

use prost::Message;
use quantir::formats::savedmodel::bundle::{mask_crc, Bundle, BundleEntry, BundleHeader};
use quantir::formats::savedmodel::proto::{TensorShapeDim, TensorShapeProto};
use quantir::tensor::Tensor;
use std::path::Path;

fn copy_bundle(to: &Path) -> std::path::PathBuf {
    let src = common::data("digits_cnn_savedmodel/variables");
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
    to.join("variables")
}

#[test]
fn shared_checkpoint_holds_the_frozen_models_weights() {
    let b = Bundle::open(&common::data("digits_cnn_savedmodel/variables/variables")).unwrap();
    // every weight of the frozen TF-dialect export is a variable of the checkpoint, bit for bit
    let ctx = quantir::ir::new_context();
    let m = quantir::ir::load(&ctx, &common::example("digits_cnn.mlir")).unwrap();
    let func = quantir::ir::graph::find_function(&m, None).unwrap();
    let mut weights = Vec::new();
    for op in quantir::ir::graph::body_ops(func) {
        if let Some(Tensor::F32(t)) = quantir::ir::ops::constant_value(op) {
            if t.len() > 1 {
                weights.push(t);
            }
        }
    }
    assert!(weights.len() >= 6, "{} weight constants", weights.len());
    let vars: Vec<Tensor> = b
        .entries
        .keys()
        .filter(|k| k.ends_with("VARIABLE_VALUE"))
        .map(|k| b.read(k).unwrap())
        .collect();
    for w in &weights {
        let found = vars.iter().any(|v| match v {
            Tensor::F32(a) => a.shape() == w.shape() && a.iter().zip(w.iter()).all(|(x, y)| x.to_bits() == y.to_bits()),
            _ => false,
        });
        assert!(
            found,
            "no checkpoint variable equals the constant of shape {:?}",
            w.shape()
        );
    }
}

/// One SSTable block: entries (no prefix sharing), one restart point, trailer with CRC.
fn block(entries: &[(&[u8], Vec<u8>)]) -> Vec<u8> {
    fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    let mut b = Vec::new();
    for (k, v) in entries {
        varint(0, &mut b);
        varint(k.len() as u64, &mut b);
        varint(v.len() as u64, &mut b);
        b.extend_from_slice(k);
        b.extend_from_slice(v);
    }
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&b), &[0]);
    b.push(0);
    b.extend_from_slice(&mask_crc(crc).to_le_bytes());
    b
}

fn handle(off: usize, size: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for mut v in [off as u64, size as u64] {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    out
}

/// A bundle with one f32 tensor "w" = [1.5, -2, 0.25] in shard 0 of 1.
fn write_small(dir: &Path) -> std::path::PathBuf {
    let values: Vec<u8> = [1.5f32, -2.0, 0.25].iter().flat_map(|v| v.to_le_bytes()).collect();
    let prefix = dir.join("variables");
    std::fs::write(dir.join("variables.data-00000-of-00001"), &values).unwrap();
    let header = BundleHeader {
        num_shards: 1,
        endianness: 0,
    }
    .encode_to_vec();
    let entry = BundleEntry {
        dtype: 1,
        shape: Some(TensorShapeProto {
            dim: vec![TensorShapeDim {
                size: 3,
                name: String::new(),
            }],
            unknown_rank: false,
        }),
        shard_id: 0,
        offset: 0,
        size: 12,
        crc32c: mask_crc(crc32c::crc32c(&values)),
        slices: vec![],
    }
    .encode_to_vec();
    let data = block(&[(b"", header), (b"w", entry)]);
    let data_len = data.len() - 5;
    let index = block(&[(b"x", handle(0, data_len))]);
    let mut file = data.clone();
    let index_off = file.len();
    file.extend_from_slice(&index);
    let mut footer = handle(0, 0);
    footer.extend(handle(index_off, index.len() - 5));
    footer.resize(40, 0);
    footer.extend_from_slice(&0xdb4775248b80fb57u64.to_le_bytes());
    file.extend_from_slice(&footer);
    std::fs::write(dir.join("variables.index"), file).unwrap();
    prefix
}

#[test]
fn hand_built_bundle_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = write_small(dir.path());
    let b = Bundle::open(&prefix).unwrap();
    assert_eq!(b.entries.keys().collect::<Vec<_>>(), ["w"]);
    let Tensor::F32(w) = b.read("w").unwrap() else {
        panic!("dtype")
    };
    assert_eq!(w.iter().copied().collect::<Vec<f32>>(), [1.5, -2.0, 0.25]);
    assert!(b.read("v").unwrap_err().to_string().contains("no tensor 'v'"));
}

#[test]
fn corrupted_and_missing_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = copy_bundle(dir.path());
    let b = Bundle::open(&prefix).unwrap();
    let key = b
        .entries
        .keys()
        .find(|k| k.ends_with("VARIABLE_VALUE"))
        .unwrap()
        .clone();
    // a flipped byte in the shard: the tensor's checksum fails
    let shard = b.shard_path(0);
    let mut bytes = std::fs::read(&shard).unwrap();
    let e = &b.entries[&key];
    bytes[e.offset as usize + 1] ^= 0x40;
    std::fs::write(&shard, &bytes).unwrap();
    let err = b.read(&key).unwrap_err().to_string();
    assert!(
        err.contains("checksum mismatch") && err.contains(&key) && err.contains("data-00000-of-00001"),
        "{err}"
    );
    // the shard gone
    std::fs::remove_file(&shard).unwrap();
    let err = b.read(&key).unwrap_err().to_string();
    assert!(err.contains("shard missing") && err.contains(&key), "{err}");
    // a flipped byte inside the index's data block: the block checksum fails at open
    let index = dir.path().join("variables.index");
    let mut idx = std::fs::read(&index).unwrap();
    idx[10] ^= 0x01;
    std::fs::write(&index, &idx).unwrap();
    let err = Bundle::open(&prefix).unwrap_err().to_string();
    assert!(
        err.contains("variables.index") && err.contains("checksum mismatch"),
        "{err}"
    );
    // truncated index and no index at all
    std::fs::write(&index, &idx[..20]).unwrap();
    assert!(Bundle::open(&prefix)
        .unwrap_err()
        .to_string()
        .contains("shorter than a table footer"));
    std::fs::remove_file(&index).unwrap();
    assert!(Bundle::open(&prefix).unwrap_err().to_string().contains("cannot read"));
}
