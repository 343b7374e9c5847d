//! Reading and writing stats files (the JSON of `quantir-calibration`), atomically.

use crate::calibration::{CalibError, StatsFile};
use crate::fsutil::{write_atomic, WriteError};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum StatsIoError {
    #[error("{path}: cannot read: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {source}")]
    Invalid { path: PathBuf, source: CalibError },
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("merge needs at least one stats file")]
    NoInput,
}

pub fn load_stats(path: &Path) -> Result<StatsFile, StatsIoError> {
    let text = std::fs::read_to_string(path).map_err(|source| StatsIoError::Read {
        path: path.into(),
        source,
    })?;
    StatsFile::from_json(&text).map_err(|source| StatsIoError::Invalid {
        path: path.into(),
        source,
    })
}

pub fn save_stats(stats: &StatsFile, path: &Path, inputs: &[&Path]) -> Result<(), StatsIoError> {
    let text = stats.to_json().map_err(|source| StatsIoError::Invalid {
        path: path.into(),
        source,
    })?;
    write_atomic(path, text.as_bytes(), inputs)?;
    Ok(())
}

/// Merges shard files in the order given; an error names the file that does not fit.
pub fn merge_files(paths: &[PathBuf]) -> Result<StatsFile, StatsIoError> {
    let (first, rest) = paths.split_first().ok_or(StatsIoError::NoInput)?;
    let mut merged = load_stats(first)?;
    for p in rest {
        let s = load_stats(p)?;
        merged.merge(&s).map_err(|source| StatsIoError::Invalid {
            path: p.clone(),
            source,
        })?;
    }
    Ok(merged)
}
