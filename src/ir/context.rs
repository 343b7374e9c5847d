//! The one place a melior `Context` is made.

use melior::dialect::DialectRegistry;
use melior::utility::register_all_dialects;
use melior::Context;

/// A context with every upstream dialect loaded and unregistered dialects allowed, so that
/// TF-dialect ops in generic form (`"tf.Conv2D"(...)`) and ONNX ops (`"onnx.Conv"`) parse.
/// Multi-threading is off: quantir parallelises over samples itself, and a single-threaded
/// context keeps printing and diagnostics deterministic.
pub fn new_context() -> Context {
    let registry = DialectRegistry::new();
    register_all_dialects(&registry);
    let ctx = Context::new_with_registry(&registry, false);
    ctx.load_all_available_dialects();
    ctx.set_allow_unregistered_dialects(true);
    ctx
}
