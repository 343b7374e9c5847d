//! Atomic output files: every file quantir writes goes through [`write_atomic`], so that a
//! crash or an error never leaves a half-written output and never touches the input. On Linux
//! the bytes go into an unnamed file (`O_TMPFILE`) that gets its name only when complete, so
//! even `kill -9` mid-write leaves no file behind.

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

/// Writes `bytes` to `path` through an unnamed (else a temporary) file in the same folder,
/// synced before it takes the name. Refuses when `path` is one of `inputs`. On any error no
/// file is left behind, and the old `path`, if any, is untouched.
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
    sweep_stale_temps(dir, &name);
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = match write_unnamed(dir, path, &tmp, bytes) {
        Some(r) => r,
        None => write_named(path, &tmp, bytes),
    };
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(io(e));
    }
    // the rename itself made durable (best effort: some file systems refuse a folder's fsync)
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Writes through a named temporary file `tmp` and a rename (where unnamed files are not
/// available). A `kill -9` between the two leaves `tmp` behind, for [`sweep_stale_temps`].
fn write_named(path: &Path, tmp: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = fs::File::create(tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    fs::rename(tmp, path)
}

/// Writes into an unnamed file of `dir` (Linux `O_TMPFILE`), then gives it its name: a process
/// killed while writing leaves nothing behind, since the file has no name until it is complete.
/// A new output is linked at `path` directly; an existing one is replaced by a link at `tmp`
/// and a rename (the only moment a kill could leave `tmp`). `None` when the file system or
/// kernel has no unnamed files, or `/proc` is missing: the caller then writes a named
/// temporary file.
#[cfg(target_os = "linux")]
fn write_unnamed(dir: &Path, path: &Path, tmp: &Path, bytes: &[u8]) -> Option<std::io::Result<()>> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let unsupported = |e: &std::io::Error| {
        matches!(
            e.raw_os_error(),
            Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL | libc::ENOENT)
        )
    };
    let mut f = match fs::OpenOptions::new()
        .write(true)
        .mode(0o666)
        .custom_flags(libc::O_TMPFILE)
        .open(dir)
    {
        Ok(f) => f,
        Err(e) if unsupported(&e) => return None,
        Err(e) => return Some(Err(e)),
    };
    if let Err(e) = f.write_all(bytes).and_then(|()| f.sync_all()) {
        return Some(Err(e));
    }
    let proc_path = CString::new(format!("/proc/self/fd/{}", f.as_raw_fd())).ok()?;
    let link = |to: &Path| -> std::io::Result<()> {
        let to = CString::new(to.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
        // SAFETY: two NUL-terminated paths; AT_FDCWD for both folders
        let r = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                proc_path.as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    match link(path) {
        Ok(()) => Some(Ok(())),
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Some(link(tmp).and_then(|()| fs::rename(tmp, path))),
        Err(e) if unsupported(&e) => None,
        Err(e) => Some(Err(e)),
    }
}

#[cfg(not(target_os = "linux"))]
fn write_unnamed(_dir: &Path, _path: &Path, _tmp: &Path, _bytes: &[u8]) -> Option<std::io::Result<()>> {
    None
}

/// Removes the temporary files (`.NAME.PID.tmp`) that writes of `name` by processes no longer
/// running left in `dir` — killed between writing and renaming.
fn sweep_stale_temps(dir: &Path, name: &str) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    let prefix = format!(".{name}.");
    for e in entries.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = file
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(".tmp"))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !process_alive(pid) {
            let _ = fs::remove_file(e.path());
        }
    }
}

#[cfg(unix)]
fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists
    unsafe { libc::kill(pid, 0) == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM) }
}

#[cfg(not(unix))]
fn process_alive(_pid: u32) -> bool {
    true
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

    #[test]
    fn replaces_an_existing_file_and_sweeps_dead_writers_temps() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("out.bin");
        fs::write(&out, b"old").unwrap();
        // a temp of a process that is gone (pid beyond pid_max), and one of a live process
        let stale = d.path().join(".out.bin.4194305.tmp");
        let live = d
            .path()
            .join(format!(".out.bin.{}.tmp", std::os::unix::process::parent_id()));
        fs::write(&stale, b"half").unwrap();
        fs::write(&live, b"theirs").unwrap();
        write_atomic(&out, b"new", &[]).unwrap();
        assert_eq!(fs::read(&out).unwrap(), b"new");
        assert!(!stale.exists(), "a dead writer's temporary file is removed");
        assert!(live.exists(), "a live writer's temporary file is left alone");
    }
}
