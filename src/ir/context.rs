//! The one place a melior `Context` is made.

use melior::dialect::{DialectHandle, DialectRegistry};
use melior::Context;

/// A context with the dialects quantir reads, writes and runs registered (builtin, func, arith,
/// math, tensor, control flow, quant) and unregistered dialects allowed, so that TF-dialect
/// ops in generic form (`"tf.Conv2D"(...)`) and ONNX ops (`"onnx.Conv"`) parse. Ops of other
/// upstream dialects parse in generic form too; the interpreter names any it cannot run.
///
/// Registering every upstream dialect instead links all of MLIR into the binary and maps it
/// at start-up: about 25 MB more resident memory for models that never use them.
/// Multi-threading is off: quantir parallelises over samples itself, and a single-threaded
/// context keeps printing and diagnostics deterministic.
pub fn new_context() -> Context {
    let registry = DialectRegistry::new();
    for handle in [
        DialectHandle::func(),
        DialectHandle::arith(),
        DialectHandle::tensor(),
        DialectHandle::cf(),
        DialectHandle::scf(),
        DialectHandle::quant(),
    ] {
        handle.insert_dialect(&registry);
    }
    let ctx = Context::new_with_registry(&registry, false);
    ctx.load_all_available_dialects();
    ctx.set_allow_unregistered_dialects(true);
    ctx
}
