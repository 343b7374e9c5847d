//! `pin-keys`: gives every op that has results but no name location its first result's tensor
//! key as one (see `ir::keys::pin_keys`), so that keys stay put when later passes insert ops.
//!
//! ```mlir
//! %0 = "tf.Relu"(%x) : (tensor<4xf32>) -> tensor<4xf32> loc("m.mlir":3:5)
//! // becomes
//! %0 = "tf.Relu"(%x) : (tensor<4xf32>) -> tensor<4xf32> loc("@main/op#2:result#0"("m.mlir":3:5))
//! ```

use super::{Change, PassError, PassOptions, PassReport};
use melior::ir::Module;

pub fn run(module: &Module, _: &PassOptions) -> Result<PassReport, PassError> {
    let mut report = PassReport::default();
    report.add(Change::KeysPinned, crate::ir::keys::pin_keys(module));
    Ok(report)
}
