//! Fault injection (issue #20): quantir killed while it writes, a full disk, a read-only output
//! folder, sample data that changes or disappears while calibration reads it, and a calibration
//! cache that is unwritable or holds a damaged entry. Each must end in a complete output or
//! none — never a partial file or a leftover temporary — and a one-line error, never a wrong
//! result.

mod common;

use common::{arg, example, files_in, ok, quantir, quantir_env, stderr};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Delays spread over `0..span` in a scrambled but fixed order (the same on every run).
fn delays(n: usize, span: Duration) -> Vec<Duration> {
    (0..n)
        .map(|i| span.mul_f64(((i * 7919) % n) as f64 / n as f64 + 0.5 / n as f64))
        .collect()
}

const CHILD_ENV: &str = "QUANTIR_TEST_WRITE_FOREVER";
const BIG: usize = 48 << 20;

/// Not a test of its own: the process the kill test below starts and kills. It rewrites one
/// 48 MB file through `write_atomic` forever, each round with another byte value.
#[test]
#[ignore]
fn child_writes_forever() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    for round in 0u64.. {
        let bytes = vec![(round % 251) as u8; BIG];
        quantir::fsutil::write_atomic(Path::new(&path), &bytes, &[]).unwrap();
    }
}

/// `kill -9` at 16 moments of a 48 MB atomic write loop: the folder then holds the output
/// whole (all one byte value) or nothing, and no temporary file.
#[test]
fn kill_9_while_writing_leaves_a_whole_file_or_none() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.bin");
    for (i, delay) in delays(16, Duration::from_millis(400)).into_iter().enumerate() {
        let _ = std::fs::remove_file(&out);
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_writes_forever", "--ignored", "--test-threads", "1"])
            .env(CHILD_ENV, &out)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let names = files_in(dir.path());
        assert!(
            names.is_empty() || names == ["out.bin"],
            "kill {i} after {delay:?}: left {names:?}"
        );
        if let Ok(bytes) = std::fs::read(&out) {
            assert_eq!(bytes.len(), BIG, "kill {i}: partial output");
            assert!(bytes.iter().all(|&b| b == bytes[0]), "kill {i}: mixed output");
        }
    }
}

/// `kill -9` during `quantize` at 10 moments of its run: no temporary file, and an output
/// that exists is the complete one.
#[test]
fn kill_9_during_quantize_leaves_the_complete_output_or_none() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let model = arg(&example("digits_cnn.mlir"));
    let stats = d.join("s.json");
    ok(quantir(&[
        "calibrate",
        &model,
        "--data",
        &arg(&example("digits_calib.npz")),
        "-o",
        &arg(&stats),
    ]));
    let work = d.join("work");
    std::fs::create_dir(&work).unwrap();
    let out = work.join("q.mlir");
    let args = ["quantize", &model, "--stats", &arg(&stats), "-o", &arg(&out)];
    let start = Instant::now();
    ok(quantir(&args));
    let span = start.elapsed();
    let whole = std::fs::read(&out).unwrap();
    for (i, delay) in delays(10, span).into_iter().enumerate() {
        std::fs::remove_file(&out).ok();
        let mut child = Command::new(env!("CARGO_BIN_EXE_quantir"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        child.kill().unwrap();
        child.wait().unwrap();
        let names = files_in(&work);
        assert!(
            names.is_empty() || names == ["q.mlir"],
            "kill {i} after {delay:?}: left {names:?}"
        );
        if let Ok(bytes) = std::fs::read(&out) {
            assert_eq!(bytes, whole, "kill {i}: output differs from a complete run");
        }
    }
}

/// Runs `cmd` (quantir's arguments) in a private mount namespace with a tmpfs mounted at
/// `dir` with `mount_opts`, and what the tmpfs holds afterwards. `None` when this machine
/// gives no mount namespace (then the caller says it skipped).
fn with_tmpfs(dir: &Path, mount_opts: &str, cmd: &[&str]) -> Option<(std::process::Output, Vec<String>)> {
    let probe = Command::new("unshare").args(["-rm", "true"]).output().ok()?;
    if !probe.status.success() {
        return None;
    }
    let script = r#"mount -t tmpfs -o "$1" tmpfs "$0" || exit 99; shift; "$@"; rc=$?; echo "LEFT:$(ls -A "$0" | tr '\n' ' ')" >&2; exit $rc"#;
    let o = Command::new("unshare")
        .args(["-rm", "sh", "-c", script])
        .arg(dir)
        .arg(mount_opts)
        .arg(env!("CARGO_BIN_EXE_quantir"))
        .args(cmd)
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(99), "mount failed: {}", stderr(&o));
    let e = stderr(&o);
    let left = e
        .lines()
        .find_map(|l| l.strip_prefix("LEFT:"))
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    Some((o, left))
}

fn one_error_line(e: &str) -> &str {
    let errors: Vec<&str> = e.lines().filter(|l| l.contains("error:")).collect();
    assert_eq!(errors.len(), 1, "{e}");
    assert!(!e.contains("panicked"), "{e}");
    errors[0]
}

/// A disk that fills up while the output is written (a 4 KB tmpfs) and a read-only output
/// folder: exit 1, one line naming the output and the OS's reason, nothing left there.
#[test]
fn a_full_disk_or_a_read_only_folder_is_one_line_and_leaves_nothing() {
    let d = tempfile::tempdir().unwrap();
    let mnt = d.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let model = arg(&example("digits_cnn.mlir"));
    let calib = arg(&example("digits_calib.npz"));
    for (opts, out, reason) in [
        ("size=4k", "q.mlir", "No space left on device"),
        ("size=4k", "y.npz", "No space left on device"),
        ("ro", "q.onnx", "Read-only file system"),
    ] {
        let target = arg(&mnt.join(out));
        let cmd: Vec<&str> = if out.ends_with(".npz") {
            vec!["run", &model, "--data", &calib, "-o", &target]
        } else {
            vec!["quantize", &model, "--data", &calib, "--no-cache", "-o", &target]
        };
        let Some((o, left)) = with_tmpfs(&mnt, opts, &cmd) else {
            eprintln!("skipped: this machine gives no mount namespace (unshare -rm)");
            return;
        };
        assert_eq!(o.status.code(), Some(1), "{opts} {out}: {}", stderr(&o));
        let line = one_error_line(&stderr(&o)).to_string();
        assert!(line.contains(&target) && line.contains(reason), "{line}");
        assert!(left.is_empty(), "{opts} {out}: left {left:?}");
    }
}

/// 20,000 samples for the digits CNN (8×8×1), a few seconds of calibration in a debug build.
fn big_data(path: &Path, value: f32) {
    let x = ndarray::Array4::<f32>::from_shape_fn((20_000, 8, 8, 1), |(n, i, j, _)| {
        value * ((n * 31 + i * 8 + j) % 17) as f32 / 17.0
    });
    let mut w = ndarray_npy::NpzWriter::new(std::fs::File::create(path).unwrap());
    w.add_array("x", &x).unwrap();
    w.finish().unwrap();
}

/// Sample data rewritten or removed while `calibrate` reads it: exit 1 naming the file, no
/// statistics written — never statistics of a mix of the two files.
#[test]
fn data_that_changes_or_disappears_during_calibration_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let data = d.join("big.npz");
    let out = d.join("s.json");
    let model = arg(&example("digits_cnn.mlir"));
    let args = [
        "calibrate",
        &model,
        "--data",
        &arg(&data),
        "--threads",
        "1",
        "-o",
        &arg(&out),
    ];
    big_data(&data, 1.0);
    let start = Instant::now();
    ok(quantir(&args));
    let span = start.elapsed();
    assert!(
        span > Duration::from_millis(600),
        "calibration too quick ({span:?}) to change its data midway"
    );
    std::fs::remove_file(&out).unwrap();
    for change in ["rewrite", "remove"] {
        big_data(&data, 1.0);
        let child = Command::new(env!("CARGO_BIN_EXE_quantir"))
            .args(args)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(span / 4);
        match change {
            "rewrite" => big_data(&data, 2.0),
            _ => std::fs::remove_file(&data).unwrap(),
        }
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{change}: {}", stderr(&o));
        let line = one_error_line(&stderr(&o)).to_string();
        assert!(line.contains("big.npz"), "{change}: {line}");
        assert!(!out.exists(), "{change}: statistics written");
    }
}

/// A damaged cache entry is named in a warning, recalibrated and replaced (the output equals
/// an uncached run's); an unwritable cache folder is a warning, not a failure.
#[test]
fn a_damaged_or_unwritable_cache_is_a_warning_and_never_a_wrong_result() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cache = d.join("cache");
    let model = arg(&example("digits_cnn.mlir"));
    let calib = arg(&example("digits_calib.npz"));
    let quantize = |out: &str, cache_dir: &Path, extra: &[&str]| {
        let mut a = vec!["quantize", &model, "--data", &calib];
        let out = arg(&d.join(out));
        a.extend_from_slice(&["-o", &out]);
        a.extend_from_slice(extra);
        let o = quantir_env(&a, &[("QUANTIR_CACHE_DIR", cache_dir.to_str().unwrap())]);
        let e = stderr(&o);
        assert!(o.status.success() && !e.contains("panicked"), "{e}");
        (e, std::fs::read(&out).unwrap())
    };
    let (_, uncached) = quantize("ref.mlir", &cache, &["--no-cache"]);
    let (e, first) = quantize("a.mlir", &cache, &[]);
    assert!(!e.contains("warning: calibration cache"), "{e}");
    assert_eq!(first, uncached);
    let entries: Vec<_> = std::fs::read_dir(&cache).unwrap().map(|e| e.unwrap().path()).collect();
    let [entry] = entries.as_slice() else {
        panic!("{entries:?}")
    };
    for damage in [&b"{\"version\": 1, \"tensors\": {"[..], b"\x00\xff garbage", b""] {
        std::fs::write(entry, damage).unwrap();
        let (e, again) = quantize("b.mlir", &cache, &[]);
        assert!(
            e.contains("warning: calibration cache: ") && e.contains(&arg(entry)) && e.contains("damaged"),
            "{e}"
        );
        assert!(!e.contains("from cache"), "{e}");
        assert_eq!(again, uncached, "a damaged entry changed the result");
        // replaced by a good one: the next run uses it silently
        let (e, third) = quantize("c.mlir", &cache, &[]);
        assert!(e.contains("from cache") && !e.contains("warning"), "{e}");
        assert_eq!(third, uncached);
    }
    // a cache "folder" that is a file: cannot be created, so a warning and the right model
    let blocked = d.join("blocked");
    std::fs::write(&blocked, b"a file, not a folder").unwrap();
    let (e, m) = quantize("d.mlir", &blocked.join("sub"), &[]);
    assert!(e.contains("warning: calibration cache: "), "{e}");
    assert_eq!(m, uncached);
}
