//! Walking and editing the op graph: functions, their ops, the uses of a value, insertion,
//! rewiring one operand, cloning, and erasure that refuses to leave dangling uses.
//!
//! melior has no use-lists and no safe `OperationRef` → `OperationRefMut`; the few `unsafe`
//! calls that fill those gaps live here and nowhere else.

use super::IrError;
use melior::ir::attribute::AttributeLike;
use melior::ir::block::BlockLike;
use melior::ir::operation::OperationRefMut;
use melior::ir::operation::{OperationLike, OperationMutLike};
use melior::ir::RegionLike;
use melior::ir::{Attribute, Module, Operation, OperationRef, Value, ValueLike};

/// The name of an op (`tf.Conv2D`, `func.func`).
pub fn op_name<'c: 'a, 'a>(op: &impl OperationLike<'c, 'a>) -> String {
    crate::ir::ref_str(op.name().as_string_ref())
        .unwrap_or("<non-utf8>")
        .to_string()
}

/// A string attribute's value (`sym_name`, `padding`, ...).
pub fn string_attr<'c: 'a, 'a>(op: &impl OperationLike<'c, 'a>, name: &str) -> Option<String> {
    let a = op.attribute(name).ok()?;
    string_value(a)
}

/// The value of a `StringAttr`.
pub fn string_value(a: Attribute) -> Option<String> {
    unsafe {
        if !mlir_sys::mlirAttributeIsAString(a.to_raw()) {
            return None;
        }
        let s = mlir_sys::mlirStringAttrGetValue(a.to_raw());
        if s.length == 0 || s.data.is_null() {
            return Some(String::new());
        }
        let bytes = std::slice::from_raw_parts(s.data as *const u8, s.length);
        Some(String::from_utf8_lossy(bytes).into_owned())
    }
}

/// The `func.func` ops at the top level of a module, in order.
pub fn functions<'c, 'a>(module: &'a Module<'c>) -> Vec<OperationRef<'c, 'a>> {
    block_ops(module.body())
        .into_iter()
        .filter(|op| op_name(op) == "func.func")
        .collect()
}

/// A function's symbol name.
pub fn function_name<'c: 'a, 'a>(func: &impl OperationLike<'c, 'a>) -> String {
    string_attr(func, "sym_name").unwrap_or_default()
}

/// The function named `name`, or the only/first public one when `name` is `None`
/// (`main` is preferred when several exist).
pub fn find_function<'c, 'a>(module: &'a Module<'c>, name: Option<&str>) -> Result<OperationRef<'c, 'a>, IrError> {
    let funcs = functions(module);
    if let Some(n) = name {
        return funcs
            .into_iter()
            .find(|f| function_name(f) == n)
            .ok_or_else(|| IrError::Invalid(format!("no function named @{n} in the module")));
    }
    let public: Vec<_> = funcs
        .iter()
        .copied()
        .filter(|f| string_attr(f, "sym_visibility").as_deref() != Some("private"))
        .collect();
    if let Some(m) = public.iter().find(|f| function_name(*f) == "main") {
        return Ok(*m);
    }
    public
        .first()
        .copied()
        .ok_or_else(|| IrError::Invalid("the module has no public func.func".into()))
}

/// The ops of a block, in order.
pub fn block_ops<'c, 'a>(block: impl BlockLike<'c, 'a>) -> Vec<OperationRef<'c, 'a>> {
    let mut ops = Vec::new();
    let mut cur = block.first_operation();
    while let Some(op) = cur {
        ops.push(op);
        cur = op.next_in_block();
    }
    ops
}

/// The ops of a function's body (first block of its region), in order; empty for declarations.
pub fn body_ops<'c, 'a>(func: OperationRef<'c, 'a>) -> Vec<OperationRef<'c, 'a>> {
    match func.region(0).ok().and_then(|r| r.first_block()) {
        Some(b) => block_ops(b),
        None => Vec::new(),
    }
}

/// Every op nested in `root` (pre-order, `root` excluded), with stable handles.
pub fn nested_ops<'c, 'a>(root: OperationRef<'c, 'a>) -> Vec<OperationRef<'c, 'a>> {
    let mut raws = Vec::new();
    root.walk(melior::ir::operation::WalkOrder::PreOrder, |op| {
        raws.push(op.to_raw());
        melior::ir::operation::WalkResult::Advance
    });
    raws.into_iter()
        .filter(|r| r.ptr != root.to_raw().ptr)
        .map(|r| unsafe { OperationRef::from_raw(r) })
        .collect()
}

/// One use of a value: the op that uses it and the operand position.
#[derive(Clone, Copy, Debug)]
pub struct Use<'c, 'a> {
    pub owner: OperationRef<'c, 'a>,
    pub operand: usize,
}

/// Every use of `value`, in MLIR's use-list order.
pub fn uses<'c, 'a>(value: Value<'c, 'a>) -> Vec<Use<'c, 'a>> {
    let mut out = Vec::new();
    unsafe {
        let mut u = mlir_sys::mlirValueGetFirstUse(value.to_raw());
        while !mlir_sys::mlirOpOperandIsNull(u) {
            out.push(Use {
                owner: OperationRef::from_raw(mlir_sys::mlirOpOperandGetOwner(u)),
                operand: mlir_sys::mlirOpOperandGetOperandNumber(u) as usize,
            });
            u = mlir_sys::mlirOpOperandGetNextUse(u);
        }
    }
    out
}

/// The op that defines `value`, or `None` for a block argument.
pub fn defining_op<'c, 'a>(value: Value<'c, 'a>) -> Option<OperationRef<'c, 'a>> {
    if value.is_block_argument() {
        return None;
    }
    unsafe { OperationRef::from_option_raw(mlir_sys::mlirOpResultGetOwner(value.to_raw())) }
}

/// A mutable handle to an op of a module we hold mutably (melior offers no safe conversion).
fn as_mut<'c, 'a>(op: OperationRef<'c, 'a>) -> OperationRefMut<'c, 'a> {
    unsafe { OperationRefMut::from_raw(op.to_raw()) }
}

/// Rewires operand `index` of `op` to `value`, leaving its other uses untouched.
pub fn set_operand<'c, 'a>(op: OperationRef<'c, 'a>, index: usize, value: Value<'c, 'a>) {
    as_mut(op).set_operand(index, value);
}

/// Inserts `new` right after `anchor` in the anchor's block.
pub fn insert_after<'c, 'a>(anchor: OperationRef<'c, 'a>, new: Operation<'c>) -> Result<OperationRef<'c, 'a>, IrError> {
    let block = anchor
        .block()
        .ok_or_else(|| IrError::Invalid(format!("{} is not in a block", op_name(&anchor))))?;
    Ok(block.insert_operation_after(anchor, new))
}

/// Inserts `new` right before `anchor` in the anchor's block.
pub fn insert_before<'c, 'a>(
    anchor: OperationRef<'c, 'a>,
    new: Operation<'c>,
) -> Result<OperationRef<'c, 'a>, IrError> {
    let block = anchor
        .block()
        .ok_or_else(|| IrError::Invalid(format!("{} is not in a block", op_name(&anchor))))?;
    Ok(block.insert_operation_before(anchor, new))
}

/// A detached deep copy of `op` (same operands, attributes, regions and location).
pub fn clone_op<'c>(op: OperationRef<'c, '_>) -> Operation<'c> {
    unsafe { Operation::from_raw(mlir_sys::mlirOperationClone(op.to_raw())) }
}

/// Replaces every use of `from` by `to`.
pub fn replace_all_uses<'c, 'a>(from: Value<'c, 'a>, to: Value<'c, 'a>) {
    unsafe { mlir_sys::mlirValueReplaceAllUsesOfWith(from.to_raw(), to.to_raw()) }
}

/// Erases `op`; refuses (and changes nothing) while any of its results is still used, since
/// erasing a used op is undefined behaviour in a release build of MLIR.
pub fn erase_op(op: OperationRef<'_, '_>) -> Result<(), IrError> {
    for (i, r) in op.results().enumerate() {
        let n = uses(r.into()).len();
        if n > 0 {
            return Err(IrError::EraseWithUses {
                op: op_name(&op),
                result: i,
                uses: n,
            });
        }
    }
    unsafe { mlir_sys::mlirOperationDestroy(op.to_raw()) };
    Ok(())
}
