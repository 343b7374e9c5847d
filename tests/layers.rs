//! The layering of `src/`, checked from the source text: no import cycle between files, every
//! module imports only modules of its own or a lower layer, no pass imports another pass, raw
//! MLIR (`mlir_sys`, `unsafe`) only in `src/ir/`, and no file over 800 lines.
//!
//! A reference is any `crate::…`, `super::…` or `self::…` path outside comments and outside the
//! file's `#[cfg(test)]` tail (unit tests may reach anywhere), brace groups expanded, resolved
//! to the deepest file it names. A `mod.rs` declares and re-exports its own children; those
//! references are the module's face, not dependencies, and are not counted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Layers from the bottom: a module may import its own layer's modules and lower ones.
const LAYERS: &[&[&str]] = &[
    &["tensor", "fsutil", "hash", "text", "alloc"],
    &["params"],
    &["ir"],
    &["dialects"],
    &["recipe"],
    &["interp"],
    &["passes"],
    &["formats"],
    &["inspect", "precision", "stats_io", "run"],
    &["quantize"],
    &["evaluate"],
    &["report", "target"],
    &["jobs"],
    &["fuzzing"],
    &["lib", "main", "cli"],
];

/// Files that may use `unsafe` outside `src/ir/`: numeric kernels (SIMD dispatch after a CPU
/// feature check, gemm's raw-pointer API, writes into reserved buffers) and the two system
/// calls of atomic writes that std lacks (linkat of an O_TMPFILE, kill(pid, 0)), the global
/// allocator's forwarding to the system's; never MLIR handles.
const UNSAFE_ALLOWED: &[&str] = &[
    "interp/kernels/",
    "params/kernels.rs",
    "params/gemm_f64.rs",
    "fsutil.rs",
    "alloc.rs",
];

const MAX_LINES: usize = 800;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `src/`, relative, with `/` separators.
fn files() -> Vec<String> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, root, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let mut out = Vec::new();
    walk(&src(), &src(), &mut out);
    out.sort();
    out
}

/// The module path of a file: `interp/onnx.rs` → [interp, onnx], `interp/mod.rs` → [interp],
/// `lib.rs` → [].
fn module_of(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file.trim_end_matches(".rs").split('/').map(String::from).collect();
    if parts.last().is_some_and(|l| l == "mod") || file == "lib.rs" {
        parts.pop();
    }
    parts
}

/// The file that holds the module at `path`, with how many segments it consumed: the deepest
/// existing file along the path.
fn resolve(path: &[String]) -> Option<String> {
    let mut best = None;
    for n in 1..=path.len() {
        let stem = path[..n].join("/");
        if src().join(format!("{stem}.rs")).is_file() {
            best = Some(format!("{stem}.rs"));
        } else if src().join(&stem).join("mod.rs").is_file() {
            best = Some(format!("{stem}/mod.rs"));
        } else {
            break;
        }
    }
    best
}

/// The source text without comments and without the `#[cfg(test)]` tail.
fn code(text: &str) -> String {
    let body = match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    };
    body.lines()
        .map(|l| match l.find("//") {
            // a `//` inside a string literal is rare in paths; strings are not paths anyway
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Expands `a::{b, c::{d, e}}`-style paths starting at `s` into full segment lists.
fn expand(s: &[u8], mut i: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut cur = prefix.clone();
    loop {
        while i < s.len() && (s[i] as char).is_whitespace() {
            i += 1;
        }
        if i < s.len() && s[i] == b'{' {
            i += 1;
            loop {
                i = expand(s, i, cur.clone(), out);
                while i < s.len() && (s[i] as char).is_whitespace() {
                    i += 1;
                }
                if i < s.len() && s[i] == b',' {
                    i += 1;
                    continue;
                }
                if i < s.len() && s[i] == b'}' {
                    i += 1;
                }
                return i;
            }
        }
        let start = i;
        while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == b'_') {
            i += 1;
        }
        if start == i {
            out.push(cur);
            return i;
        }
        cur.push(String::from_utf8_lossy(&s[start..i]).into_owned());
        if s[i..].starts_with(b"::") {
            i += 2;
        } else {
            out.push(cur);
            return i;
        }
    }
}

/// The files a file references.
fn references(file: &str) -> BTreeSet<String> {
    let text = code(&std::fs::read_to_string(src().join(file)).unwrap());
    let s = text.as_bytes();
    let module = module_of(file);
    let mut paths = Vec::new();
    for (prefix, base) in [
        ("crate::", Vec::new()),
        ("super::", module[..module.len().saturating_sub(1)].to_vec()),
        ("self::", module.clone()),
    ] {
        let mut from = 0;
        while let Some(k) = text[from..].find(prefix) {
            let at = from + k;
            from = at + prefix.len();
            // `super::super::x`, and not part of a longer identifier
            if at > 0 && (s[at - 1].is_ascii_alphanumeric() || s[at - 1] == b'_') {
                continue;
            }
            let mut base = base.clone();
            let mut i = from;
            while text[i..].starts_with("super::") {
                base.pop();
                i += "super::".len();
            }
            expand(s, i, base, &mut paths);
        }
    }
    let dir = file.rsplit_once('/').map(|(d, _)| format!("{d}/"));
    paths
        .iter()
        .filter_map(|p| resolve(p))
        .filter(|f| f != file)
        // a mod.rs's references into its own folder are declarations and re-exports
        .filter(|f| !(file.ends_with("mod.rs") && dir.as_deref().is_some_and(|d| f.starts_with(d))))
        .collect()
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    files().into_iter().map(|f| (f.clone(), references(&f))).collect()
}

fn layer_of(file: &str) -> usize {
    let top = file.split('/').next().unwrap().trim_end_matches(".rs");
    LAYERS
        .iter()
        .position(|l| l.contains(&top))
        .unwrap_or_else(|| panic!("src/{file}: module '{top}' is in no layer of tests/layers.rs"))
}

#[test]
fn no_import_cycle_between_files() {
    let g = graph();
    // Tarjan-free: a file is on a cycle when it reaches itself
    let mut cycles = Vec::new();
    for start in g.keys() {
        let mut stack: Vec<(String, Vec<String>)> = vec![(start.clone(), vec![start.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((f, path)) = stack.pop() {
            for d in &g[&f] {
                if d == start {
                    cycles.push([path.clone(), vec![start.clone()]].concat().join(" → "));
                } else if seen.insert(d.clone()) {
                    stack.push((d.clone(), [path.clone(), vec![d.clone()]].concat()));
                }
            }
        }
    }
    cycles.sort();
    cycles.dedup();
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn modules_import_only_their_own_or_lower_layers() {
    let mut upward = Vec::new();
    for (f, deps) in graph() {
        for d in deps {
            if layer_of(&d) > layer_of(&f) {
                upward.push(format!("src/{f} imports src/{d}"));
            }
        }
    }
    assert!(upward.is_empty(), "imports of a higher layer:\n{}", upward.join("\n"));
}

#[test]
fn no_pass_imports_another_pass() {
    let pass_of = |f: &str| -> Option<String> {
        let rest = f.strip_prefix("passes/")?;
        // the registry and the report/error types every pass shares are not passes
        (!["mod.rs", "report.rs"].contains(&rest))
            .then(|| rest.split('/').next().unwrap().trim_end_matches(".rs").to_string())
    };
    let mut bad = Vec::new();
    for (f, deps) in graph() {
        let Some(p) = pass_of(&f) else { continue };
        for d in deps {
            if pass_of(&d).is_some_and(|q| q != p) {
                bad.push(format!("src/{f} imports src/{d}"));
            }
        }
    }
    assert!(bad.is_empty(), "passes importing passes:\n{}", bad.join("\n"));
}

#[test]
fn raw_mlir_only_in_ir() {
    let mut bad = Vec::new();
    for f in files() {
        if f.starts_with("ir/") {
            continue;
        }
        let text = std::fs::read_to_string(src().join(&f)).unwrap();
        for (n, line) in code(&text).lines().enumerate() {
            let word = |w: &str| {
                line.match_indices(w).any(|(i, _)| {
                    let before = line[..i].chars().last();
                    let after = line[i + w.len()..].chars().next();
                    !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                        && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
                })
            };
            if word("mlir_sys") {
                bad.push(format!("src/{f}:{}: mlir_sys", n + 1));
            }
            if word("unsafe") && !UNSAFE_ALLOWED.iter().any(|a| f.starts_with(a)) {
                bad.push(format!("src/{f}:{}: unsafe", n + 1));
            }
        }
    }
    assert!(bad.is_empty(), "raw MLIR outside src/ir/:\n{}", bad.join("\n"));
}

#[test]
fn no_file_over_800_lines() {
    let big: Vec<String> = files()
        .into_iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(src().join(&f)).unwrap().lines().count();
            (n > MAX_LINES).then(|| format!("src/{f}: {n} lines"))
        })
        .collect();
    assert!(big.is_empty(), "files over {MAX_LINES} lines:\n{}", big.join("\n"));
}

/// The checker itself: paths with braces and `super` resolve to the files they name.
#[test]
fn references_are_resolved_through_braces_and_super() {
    let mut out = Vec::new();
    let s = b"a::{b, c::{d, e}}, f";
    expand(s, 0, vec!["x".into()], &mut out);
    let joined: Vec<String> = out.iter().map(|p| p.join("::")).collect();
    assert_eq!(joined, ["x::a::b", "x::a::c::d", "x::a::c::e"]);
    assert_eq!(module_of("interp/onnx.rs"), ["interp", "onnx"]);
    assert_eq!(module_of("interp/mod.rs"), ["interp"]);
    assert_eq!(
        resolve(&["ir".into(), "graph".into(), "uses".into()]).as_deref(),
        Some("ir/graph.rs")
    );
    assert_eq!(resolve(&["ir".into(), "IrError".into()]).as_deref(), Some("ir/mod.rs"));
}
