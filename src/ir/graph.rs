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
use melior::ir::{Attribute, Module, Operation, OperationRef, TypeLike, Value, ValueLike};

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

/// The types of a function's arguments (its entry block's), in order.
pub fn argument_types<'c>(func: OperationRef<'c, '_>) -> Vec<melior::ir::Type<'c>> {
    func.region(0)
        .ok()
        .and_then(|r| r.first_block())
        .map(|b| {
            (0..b.argument_count())
                .filter_map(|k| b.argument(k).ok())
                .map(|a| a.r#type())
                .collect()
        })
        .unwrap_or_default()
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

/// A mutable handle to `op`, for setting attributes and locations (see [`as_mut`]).
pub fn op_mut<'c, 'a>(op: OperationRef<'c, 'a>) -> OperationRefMut<'c, 'a> {
    as_mut(op)
}

/// The module's top-level op, mutable (module attributes: opsets, metadata, versions).
pub fn module_op_mut<'c, 'a>(module: &'a Module<'c>) -> OperationRefMut<'c, 'a> {
    as_mut(module.as_operation())
}

/// Replaces all operands of `op` by `operands` (their number may change).
pub fn set_operands<'c, 'a>(op: OperationRef<'c, 'a>, operands: &[Value<'c, 'a>]) {
    let raw: Vec<mlir_sys::MlirValue> = operands.iter().map(|v| v.to_raw()).collect();
    unsafe { mlir_sys::mlirOperationSetOperands(op.to_raw(), raw.len() as isize, raw.as_ptr()) };
}

/// Gives `value` a new type (importers refine types they first left unranked).
pub fn set_value_type<'c>(value: Value<'c, '_>, ty: melior::ir::Type<'c>) {
    unsafe { mlir_sys::mlirValueSetType(value.to_raw(), ty.to_raw()) };
}

/// The argument number of a block argument; `None` for an op result.
pub fn block_argument_number(value: Value) -> Option<usize> {
    unsafe {
        mlir_sys::mlirValueIsABlockArgument(value.to_raw())
            .then(|| mlir_sys::mlirBlockArgumentGetArgNumber(value.to_raw()) as usize)
    }
}

/// A `&'c Context` for a `ContextRef<'c>` that outlives it.
///
/// melior's `ContextRef::to_ref` reinterprets a reference *to the `ContextRef` itself*, so the
/// result dangles as soon as that `ContextRef` goes. Here each context gets one `ContextRef`
/// kept for the process (keyed by the context's address; a later context at the same address
/// holds the same pointer, so the kept value stays right for it): a few words per context ever
/// created, and a reference valid for as long as the context is.
fn lasting_context(r: melior::ContextRef<'_>) -> &melior::Context {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static KEPT: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);
    // valid here: `r` lives until the end of this function
    let raw_ctx = unsafe { r.to_ref() }.to_raw();
    let raw = raw_ctx.ptr as usize;
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    let at = *kept.get_or_insert_with(HashMap::new).entry(raw).or_insert_with(|| {
        let boxed: Box<melior::ContextRef<'static>> = Box::new(unsafe { melior::ContextRef::from_raw(raw_ctx) });
        Box::into_raw(boxed) as usize
    });
    let kept_ref: &'static melior::ContextRef<'static> = unsafe { &*(at as *const melior::ContextRef<'static>) };
    unsafe { kept_ref.to_ref() }
}

/// The context an op lives in, for as long as the op's borrow of it.
pub fn context_of<'c: 'a, 'a>(op: &impl OperationLike<'c, 'a>) -> &'c melior::Context {
    lasting_context(op.context())
}

/// The context a value lives in.
pub fn value_context<'c>(v: Value<'c, '_>) -> &'c melior::Context {
    lasting_context(v.context())
}

/// The context of a module.
pub fn module_context<'c>(module: &Module<'c>) -> &'c melior::Context {
    lasting_context(module.context())
}

/// Sets a function's `function_type` from its argument and result types.
pub fn set_function_type<'c>(
    ctx: &'c melior::Context,
    f: OperationRef<'c, '_>,
    ins: &[melior::ir::Type<'c>],
    outs: &[melior::ir::Type<'c>],
) {
    use melior::ir::attribute::TypeAttribute;
    let ty = melior::ir::r#type::FunctionType::new(ctx, ins, outs);
    as_mut(f).set_attribute("function_type", TypeAttribute::new(ty.into()).into());
}

/// The entry of a `DictionaryAttr` named `key`.
pub fn dictionary_get<'c>(dict: Attribute<'c>, key: &str) -> Option<Attribute<'c>> {
    unsafe {
        if !mlir_sys::mlirAttributeIsADictionary(dict.to_raw()) {
            return None;
        }
        let id = mlir_sys::MlirStringRef {
            data: key.as_ptr() as *const _,
            length: key.len(),
        };
        let a = mlir_sys::mlirDictionaryAttrGetElementByName(dict.to_raw(), id);
        (!a.ptr.is_null()).then(|| Attribute::from_raw(a))
    }
}
