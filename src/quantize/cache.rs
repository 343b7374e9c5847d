//! The calibration cache of `quantize --data`: statistics stored under a key that hashes
//! everything calibration depends on — the prepared model, the tensors observed and their
//! methods, the calibration options and the data's bytes — and nothing that only the rewrite
//! depends on, so that a second `quantize` with other storage types or exclusions of
//! float-only ops skips calibration.
//!
//! The folder is `$QUANTIR_CACHE_DIR`, else `$XDG_CACHE_HOME/quantir`, else
//! `~/.cache/quantir`; one JSON stats file per key, written atomically.

use crate::calibration::StatsFile;
use crate::formats::data::{Binding, Source};
use std::path::{Path, PathBuf};

/// FNV-1a 64, fed incrementally.
pub use crate::hash::Fnv;

/// The cache folder (see the module documentation); `None` without any of the variables.
pub fn default_dir() -> Option<PathBuf> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("QUANTIR_CACHE_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|p| p.join("quantir")))
        .or_else(|| var("HOME").map(|p| p.join(".cache").join("quantir")))
}

/// Feeds a file's bytes to `h` in 64 KB pieces: a calibration set is never held in memory
/// whole, not even to compute its cache key.
fn hash_file(h: &mut Fnv, path: &Path) -> std::io::Result<()> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match f.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                h.bytes(&buf[..n]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Hashes the bytes a binding reads: each array's name, dtype, shape and the data file's (or
/// folder's files') contents, plus image decoding options.
pub fn hash_data(h: &mut Fnv, binding: &Binding) -> std::io::Result<()> {
    let path = &binding.path;
    if path.is_dir() {
        for f in &crate::formats::data::folder_files(path)? {
            h.field(&f.file_name().unwrap_or_default().to_string_lossy());
            hash_file(h, f)?;
        }
    } else {
        hash_file(h, path)?;
    }
    for c in &binding.columns {
        h.field(&c.name).field(if c.add_batch { "batch" } else { "" });
        match &c.source {
            Source::Array(t) => h.field(&format!("{:?}{:?}", t.dtype(), t.shape())),
            Source::Images(folder, shape) => h.field(&format!("{:?}{:?}{}", folder.options, shape, folder.files.len())),
        };
    }
    h.field(&binding.samples.to_string());
    Ok(())
}

/// The file that holds `key`'s statistics.
pub fn entry(dir: &Path, key: &str) -> PathBuf {
    dir.join(format!("stats-{key}.json"))
}

/// The cached statistics for `key`: `None` when there is no entry, an error naming the entry
/// when it cannot be read or is damaged (the caller recalibrates and says so).
pub fn load(dir: &Path, key: &str) -> Result<Option<StatsFile>, String> {
    let path = entry(dir, key);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: cannot read: {e}", path.display())),
    };
    let text = String::from_utf8(bytes).map_err(|_| format!("{}: damaged (not UTF-8 text)", path.display()))?;
    StatsFile::from_json(&text)
        .map(Some)
        .map_err(|e| format!("{}: damaged ({})", path.display(), e.to_string().replace('\n', " ")))
}

/// Stores `stats` under `key` (creating the folder).
pub fn store(dir: &Path, key: &str, stats: &StatsFile) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let json = stats.to_json().map_err(|e| e.to_string())?;
    crate::fsutil::write_atomic(&entry(dir, key), json.as_bytes(), &[]).map_err(|e| e.to_string())
}
