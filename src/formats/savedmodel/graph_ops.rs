//! The GraphDef ops and dtypes the SavedModel import treats specially: control flow it refuses,
//! identities it removes, calls it inlines, and the non-numeric dtypes it refuses.

/// Ops TensorFlow uses for control flow, which a straight-line function cannot hold.
pub const CONTROL_FLOW: &[&str] = &[
    "Switch",
    "RefSwitch",
    "Merge",
    "RefMerge",
    "Enter",
    "RefEnter",
    "Exit",
    "RefExit",
    "NextIteration",
    "RefNextIteration",
    "LoopCond",
    "ControlTrigger",
    "If",
    "StatelessIf",
    "While",
    "StatelessWhile",
    "Case",
    "StatelessCase",
    "For",
];

/// Ops that only forward their inputs: their results are their inputs.
pub const IDENTITIES: &[&str] = &["Identity", "IdentityN", "StopGradient", "Snapshot", "PreventGradient"];

/// Call ops whose callee is attribute `f`.
pub const CALLS: &[&str] = &["StatefulPartitionedCall", "PartitionedCall"];

/// Deepest call nesting followed (deeper is taken as recursion).
pub const MAX_CALL_DEPTH: usize = 64;

pub const DT_STRING: i32 = 7;
pub const DT_RESOURCE: i32 = 20;
pub const DT_VARIANT: i32 = 21;
