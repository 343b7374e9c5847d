//! The MLIR rewriter: one pass per file, run by name (`quantir opt --pass NAME`).
//!
//! A pass is a function over a whole module that reports what it changed. The registry
//! below is the only list of passes: the CLI, `opt` and the tests all go through it.

pub mod strip_identity;

use crate::ir::IrError;
use melior::ir::Module;

/// What a pass did: counts by kind of change, and warnings worth showing a user.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PassReport {
    pub changes: std::collections::BTreeMap<String, usize>,
    pub warnings: Vec<String>,
}

impl PassReport {
    pub fn count(&mut self, what: &str) {
        *self.changes.entry(what.to_string()).or_insert(0) += 1;
    }
    pub fn total(&self) -> usize {
        self.changes.values().sum()
    }
}

/// One registered pass.
pub struct PassInfo {
    pub name: &'static str,
    pub summary: &'static str,
    pub run: fn(&Module) -> Result<PassReport, IrError>,
}

/// Every pass quantir knows, by the name `opt --pass` takes.
pub const PASSES: &[PassInfo] = &[PassInfo {
    name: "strip-identity",
    summary:
        "remove tf.Identity / IdentityN / StopGradient between producers and consumers (function results keep theirs)",
    run: strip_identity::run,
}];

/// The pass called `name`.
pub fn find(name: &str) -> Option<&'static PassInfo> {
    PASSES.iter().find(|p| p.name == name)
}

/// Names of all passes, for usage errors.
pub fn names() -> Vec<&'static str> {
    PASSES.iter().map(|p| p.name).collect()
}

/// Runs the named passes in order and checks that the module still verifies after each.
pub fn run_pipeline(module: &Module, names: &[String]) -> Result<Vec<(String, PassReport)>, IrError> {
    let mut out = Vec::new();
    for n in names {
        let pass = find(n).ok_or_else(|| IrError::Invalid(format!("unknown pass '{n}'")))?;
        let report = (pass.run)(module)?;
        crate::ir::io::verify(module)
            .map_err(|d| IrError::Invalid(format!("module does not verify after pass {n}: {d}")))?;
        out.push((n.clone(), report));
    }
    Ok(out)
}
