//! Atomic output files: every file quantir writes goes through [`write_atomic`], so that a
//! crash or an error never leaves a half-written output and never touches the input.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Why an output could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("{path}: refusing to write the output over the input file")]
    SameAsInput { path: PathBuf },
    #[error("{path}: output folder {dir} does not exist")]
    MissingDir { path: PathBuf, dir: PathBuf },
    #[error("{path}: cannot write: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// The absolute form of `p` with symlinks resolved as far as the path exists, so that two
/// spellings of the same file compare equal even when the file does not exist yet.
fn resolved(p: &Path) -> PathBuf {
    if let Ok(c) = fs::canonicalize(p) {
        return c;
    }
    let parent = p
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    match (fs::canonicalize(parent), p.file_name()) {
        (Ok(d), Some(name)) => d.join(name),
        _ => p.to_path_buf(),
    }
}

/// True when `a` and `b` name the same file.
pub fn same_file(a: &Path, b: &Path) -> bool {
    resolved(a) == resolved(b)
}

/// Writes `bytes` to `path` through a temporary file in the same folder and a rename.
/// Refuses when `path` is one of `inputs`. On any error no file is left behind.
pub fn write_atomic(path: &Path, bytes: &[u8], inputs: &[&Path]) -> Result<(), WriteError> {
    if inputs.iter().any(|i| same_file(i, path)) {
        return Err(WriteError::SameAsInput {
            path: path.to_path_buf(),
        });
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(WriteError::MissingDir {
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
        });
    }
    let io = |source| WriteError::Io {
        path: path.to_path_buf(),
        source,
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(io(e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_input_and_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        let input = d.path().join("in.txt");
        fs::write(&input, "keep").unwrap();
        let other_spelling = d.path().join(".").join("in.txt");
        assert!(matches!(
            write_atomic(&other_spelling, b"x", &[&input]),
            Err(WriteError::SameAsInput { .. })
        ));
        assert_eq!(fs::read_to_string(&input).unwrap(), "keep");
        let missing = d.path().join("nope").join("out.txt");
        assert!(matches!(
            write_atomic(&missing, b"x", &[]),
            Err(WriteError::MissingDir { .. })
        ));
        let out = d.path().join("out.txt");
        write_atomic(&out, b"data", &[&input]).unwrap();
        assert_eq!(fs::read(&out).unwrap(), b"data");
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 2, "no temporary file left");
    }
}
