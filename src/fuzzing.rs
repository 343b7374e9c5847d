//! Fuzz targets: one function per parser of user input, taking arbitrary bytes. Each must
//! return — an error is fine, a panic, an abort or unbounded memory is a bug. `fuzz/` runs
//! them under libFuzzer (nightly, `cargo fuzz run NAME`); `tests/fuzz_seeds.rs` runs them
//! over seed corpora and mutations of them on the stable toolchain, so they stay built and
//! exercised without nightly.
//!
//! Parsers that read files (npy/npz, images, SavedModels) get the bytes through a private
//! temporary folder. Each target says whether the input was accepted, so that the seed test
//! can check its seeds are inputs the parser takes (and so reach past the first check).

use crate::formats;
use std::path::Path;

/// Every target, by name (the `fuzz/fuzz_targets/NAME.rs` files and the seed test use these).
pub const TARGETS: &[(&str, fn(&[u8]) -> bool)] = &[
    ("image", image),
    ("mlir", mlir),
    ("mlir_bytecode", mlir_bytecode),
    ("npy", npy),
    ("npz", npz),
    ("onnx_model", onnx_model),
    ("recipe_toml", recipe_toml),
    ("saved_model_pb", saved_model_pb),
    ("stats_json", stats_json),
    ("variables_bundle", variables_bundle),
    ("variables_index", variables_index),
];

/// Writes `files` (name, bytes) into an empty folder and calls `f` on it. The folder is one
/// per thread, emptied before each call (a temporary folder per input would cost libFuzzer
/// most of its time in the file system).
fn in_folder(files: &[(&str, &[u8])], f: impl FnOnce(&Path) -> bool) -> bool {
    thread_local! {
        static ROOT: Option<tempfile::TempDir> = tempfile::tempdir().ok();
    }
    ROOT.with(|root| {
        let Some(root) = root else { return false };
        let dir = root.path().join("input");
        if dir.exists() && std::fs::remove_dir_all(&dir).is_err() {
            return false;
        }
        if std::fs::create_dir(&dir).is_err() {
            return false;
        }
        for (name, bytes) in files {
            let p = dir.join(name);
            if let Some(parent) = p.parent() {
                if std::fs::create_dir_all(parent).is_err() {
                    return false;
                }
            }
            if std::fs::write(&p, bytes).is_err() {
                return false;
            }
        }
        f(&dir)
    })
}

/// Inputs one MLIR context serves before it is made anew. Making one (every dialect
/// registered) costs about 0.3 ms, most of what a small input costs; a context also keeps every
/// type and attribute it has seen, so it is not kept forever.
const CONTEXT_REUSE: usize = 256;

/// Calls `f` with this thread's MLIR context, made anew every [`CONTEXT_REUSE`] calls.
fn with_context<R>(f: impl FnOnce(&melior::Context) -> R) -> R {
    thread_local! {
        static CTX: std::cell::RefCell<(Option<melior::Context>, usize)> =
            const { std::cell::RefCell::new((None, 0)) };
    }
    CTX.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.1 >= CONTEXT_REUSE {
            *slot = (None, 0);
        }
        slot.1 += 1;
        f(slot.0.get_or_insert_with(crate::ir::new_context))
    })
}

/// An `.onnx` model as bytes: import into MLIR.
pub fn onnx_model(data: &[u8]) -> bool {
    with_context(|ctx| {
        // bound before `ctx` goes: the module the import returns borrows it
        let ok = formats::onnx::import::import(ctx, data, Path::new("fuzz.onnx")).is_ok();
        ok
    })
}

/// MLIR text (bytecode has its own target, [`mlir_bytecode`]).
pub fn mlir(data: &[u8]) -> bool {
    crate::ir::ModuleFormat::detect(data) == crate::ir::ModuleFormat::Text && parse_mlir(data)
}

/// MLIR bytecode. MLIR 22's bytecode reader trusts the lengths a file declares: libFuzzer
/// finds inputs on which it calls `report_fatal_error` (a shape list longer than memory) or
/// loops for minutes, within seconds. Those are MLIR's bugs, not quantir's, and cannot be
/// fixed from outside; the target stays so that quantir's side (diagnostics of any bytes, the
/// CLI's one-line message for MLIR's fatal errors) is fuzzed, and it is run by name, not in
/// CI's smoke run (fuzz/README.md).
pub fn mlir_bytecode(data: &[u8]) -> bool {
    crate::ir::ModuleFormat::detect(data) == crate::ir::ModuleFormat::Bytecode && parse_mlir(data)
}

fn parse_mlir(data: &[u8]) -> bool {
    with_context(|ctx| {
        // bound before `ctx` goes: the module the parser returns borrows it
        let ok = crate::ir::io::load_bytes(ctx, data, Path::new("fuzz.mlir")).is_ok();
        ok
    })
}

/// Reads every array of a dataset file, sample by sample.
fn read_dataset(path: &Path) -> bool {
    let Ok(d) = formats::data::Dataset::open(path) else {
        return false;
    };
    let names: Vec<String> = d.arrays.iter().map(|(n, _)| n.clone()).collect();
    names.iter().all(|n| matches!(d.load(n), Some(Ok(_))))
}

pub fn npy(data: &[u8]) -> bool {
    in_folder(&[("x.npy", data)], |d| read_dataset(&d.join("x.npy")))
}

pub fn npz(data: &[u8]) -> bool {
    in_folder(&[("x.npz", data)], |d| read_dataset(&d.join("x.npz")))
}

/// One image file in a folder, decoded at its own size.
pub fn image(data: &[u8]) -> bool {
    in_folder(&[("img/a.png", data)], |d| {
        let opts = formats::images::ImageOptions::default();
        let Ok(f) = formats::images::ImageFolder::open(&d.join("img"), &opts) else {
            return false;
        };
        match f.shape_for(&[Some(1), Some(8), Some(8), Some(3)]) {
            Ok(shape) => f.load(0, shape).is_ok(),
            Err(_) => false,
        }
    })
}

/// A statistics file (`calibrate -o S.json`).
pub fn stats_json(data: &[u8]) -> bool {
    in_folder(&[("s.json", data)], |d| {
        crate::stats_io::load_stats(&d.join("s.json")).is_ok()
    })
}

/// A recipe (`--config R.toml`).
pub fn recipe_toml(data: &[u8]) -> bool {
    std::str::from_utf8(data).is_ok_and(|text| crate::recipe::file::parse(text).is_ok())
}

/// A SavedModel's `saved_model.pb` without variables: parsed and imported.
pub fn saved_model_pb(data: &[u8]) -> bool {
    in_folder(&[("m/saved_model.pb", data)], |d| {
        formats::savedmodel::read(&d.join("m")).is_ok() && {
            // without its variables the import may stop at the first variable: still parsed
            with_context(|ctx| {
                let _ = formats::savedmodel::load(ctx, &d.join("m"), None);
            });
            true
        }
    })
}

/// A variables bundle's index (its table of tensor entries) next to an empty shard.
pub fn variables_index(data: &[u8]) -> bool {
    in_folder(
        &[("variables.index", data), ("variables.data-00000-of-00001", &[0u8; 64])],
        |d| {
            let Ok(b) = formats::savedmodel::bundle::Bundle::open(&d.join("variables")) else {
                return false;
            };
            // the shard is 64 zero bytes: reads past it fail, which is the point
            for key in b.entries.keys() {
                let _ = b.read(key);
            }
            true
        },
    )
}

/// A whole variables bundle, index and shard: the bytes are the index's length (4 bytes, little
/// endian), the index, then the shard. Every tensor the index lists is read and checked;
/// accepted when one at least reads (a bundle also lists entries quantir does not read).
pub fn variables_bundle(data: &[u8]) -> bool {
    let Some((len, rest)) = data.split_first_chunk::<4>() else {
        return false;
    };
    let len = (u32::from_le_bytes(*len) as usize).min(rest.len());
    let (index, shard) = rest.split_at(len);
    in_folder(
        &[("variables.index", index), ("variables.data-00000-of-00001", shard)],
        |d| {
            let Ok(b) = formats::savedmodel::bundle::Bundle::open(&d.join("variables")) else {
                return false;
            };
            b.entries.keys().fold(false, |any, key| b.read(key).is_ok() || any)
        },
    )
}

/// The input `variables_bundle` takes for an index and a shard (for seeds).
pub fn bundle_input(index: &[u8], shard: &[u8]) -> Vec<u8> {
    let mut v = (index.len() as u32).to_le_bytes().to_vec();
    v.extend_from_slice(index);
    v.extend_from_slice(shard);
    v
}
