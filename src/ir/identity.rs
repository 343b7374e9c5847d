//! A module's identity for the calibration cache and statistics files: a hash of everything
//! that decides what the module computes — its ops, types and attributes, and every constant's
//! bytes — the same on every machine.
//!
//! Printing a module spells its constants in hex, two characters a byte, so hashing the
//! printed form costs more than calibrating a large model (BERT-base: 340 MB of weights). The
//! printed form here elides large dense constants, and their raw bytes are hashed in walk
//! order instead.
//!
//! The hash is XXH3-64 (statistics format 2; format 1's was FNV-1a): `quantize --data` hashes
//! the model twice (the statistics' identity, then their check), and FNV-1a, one dependent
//! multiply per 8 bytes, took 0.08 s a pass over BERT-base's weights on top of reading them.

use melior::ir::Module;
use mlir_sys::{MlirAttribute, MlirOperation, MlirStringRef, MlirWalkResult};

/// The running identity hash: XXH3-64 over the module's parts in order.
#[derive(Default)]
struct Digest(xxhash_rust::xxh3::Xxh3);

impl Digest {
    fn bytes(&mut self, b: &[u8]) {
        self.0.update(b);
    }

    /// Bulk bytes (a constant's data), length-prefixed, so that ("ab", "c") and ("a", "bc")
    /// differ.
    fn bulk(&mut self, b: &[u8]) {
        self.0.update(&(b.len() as u64).to_le_bytes());
        self.0.update(b);
    }

    fn hex(&self) -> String {
        format!("{:016x}", self.0.digest())
    }
}

/// Dense constants of more elements than this are printed as `dense_resource<__elided__>`
/// and hashed from their bytes (splats are printed whatever their size).
const ELIDE_OVER: isize = 16;

type Sink<'a> = &'a mut dyn FnMut(&[u8]);

unsafe extern "C" fn forward(s: MlirStringRef, data: *mut std::ffi::c_void) {
    let sink = unsafe { &mut *(data as *mut Sink) };
    if s.length > 0 && !s.data.is_null() {
        sink(unsafe { std::slice::from_raw_parts(s.data as *const u8, s.length) });
    }
}

unsafe extern "C" fn find_resource(op: MlirOperation, data: *mut std::ffi::c_void) -> MlirWalkResult {
    let found = unsafe { &mut *(data as *mut bool) };
    unsafe {
        for i in 0..mlir_sys::mlirOperationGetNumAttributes(op) {
            if mlir_sys::mlirAttributeIsADenseResourceElements(mlir_sys::mlirOperationGetAttribute(op, i).attribute) {
                *found = true;
                return mlir_sys::MlirWalkResult_MlirWalkResultInterrupt;
            }
        }
    }
    mlir_sys::MlirWalkResult_MlirWalkResultAdvance
}

type Visit = unsafe extern "C" fn(MlirOperation, *mut std::ffi::c_void) -> MlirWalkResult;

/// Calls `visit` with `state` on every op of `module`, in pre-order.
fn walk<T>(module: &Module, visit: Visit, state: &mut T) {
    unsafe {
        mlir_sys::mlirOperationWalk(
            module.as_operation().to_raw(),
            Some(visit),
            state as *mut T as *mut _,
            mlir_sys::MlirWalkOrder_MlirWalkPreOrder,
        );
    }
}

/// True when an op of `module` holds a `dense_resource` constant.
fn has_resources(module: &Module) -> bool {
    let mut found = false;
    walk(module, find_resource, &mut found);
    found
}

/// Streams the generic printed form of `module` (no locations, dense constants over
/// [`ELIDE_OVER`] elements elided) to `sink` in chunks, without building the text.
///
/// A module with `dense_resource` constants is printed in local scope: printed as the top
/// level, it would end in its resource section, every blob in hex (MLIR spells a blob out
/// even where it then elides it), and their bytes are hashed from the attributes instead.
/// Modules without them print as they always have, so their hashes stay what they were.
fn print_structure(module: &Module, mut sink: Sink) {
    unsafe {
        let flags = mlir_sys::mlirOpPrintingFlagsCreate();
        mlir_sys::mlirOpPrintingFlagsPrintGenericOpForm(flags);
        mlir_sys::mlirOpPrintingFlagsElideLargeElementsAttrs(flags, ELIDE_OVER);
        if has_resources(module) {
            mlir_sys::mlirOpPrintingFlagsUseLocalScope(flags);
        }
        mlir_sys::mlirOperationPrintWithFlags(
            module.as_operation().to_raw(),
            flags,
            Some(forward),
            &mut sink as *mut Sink as *mut _,
        );
        mlir_sys::mlirOpPrintingFlagsDestroy(flags);
    }
}

/// Bytes of the raw data of a non-splat dense integer or float constant: one bit an element
/// for i1, else each element in whole bytes (MLIR's storage); `None` for any other attribute.
unsafe fn dense_bytes(attr: MlirAttribute) -> Option<&'static [u8]> {
    unsafe {
        let dense = mlir_sys::mlirAttributeIsADenseIntElements(attr) || mlir_sys::mlirAttributeIsADenseFPElements(attr);
        if !dense || mlir_sys::mlirDenseElementsAttrIsSplat(attr) {
            return None;
        }
        let elem = mlir_sys::mlirShapedTypeGetElementType(mlir_sys::mlirAttributeGetType(attr));
        let bits = if mlir_sys::mlirTypeIsAInteger(elem) {
            mlir_sys::mlirIntegerTypeGetWidth(elem) as usize
        } else if mlir_sys::mlirTypeIsAFloat(elem) {
            mlir_sys::mlirFloatTypeGetWidth(elem) as usize
        } else if mlir_sys::mlirTypeIsAIndex(elem) {
            64
        } else {
            return None;
        };
        let n = usize::try_from(mlir_sys::mlirElementsAttrGetNumElements(attr)).ok()?;
        let len = if bits == 1 { n.div_ceil(8) } else { n * bits.div_ceil(8) };
        let ptr = mlir_sys::mlirDenseElementsAttrGetRawData(attr) as *const u8;
        if ptr.is_null() || len == 0 {
            return Some(&[]);
        }
        // the attribute lives in the context, which outlives this hash
        Some(std::slice::from_raw_parts(ptr, len))
    }
}

/// Hashes what `print` writes through an MLIR string callback.
fn hash_printed(h: &mut Digest, print: impl FnOnce(mlir_sys::MlirStringCallback, *mut std::ffi::c_void)) {
    let mut sink = |chunk: &[u8]| {
        h.bytes(chunk);
    };
    let mut sink: Sink = &mut sink;
    print(Some(forward), &mut sink as *mut Sink as *mut _);
}

/// Hashes a `dense_resource` constant's type and bytes (a mapped blob's in place, any other
/// read element by element); false when it cannot be read, to be printed instead.
unsafe fn resource_bytes(attr: MlirAttribute, h: &mut Digest) -> bool {
    let a = unsafe { melior::ir::Attribute::from_raw(attr) };
    hash_printed(h, |cb, data| unsafe {
        mlir_sys::mlirTypePrint(mlir_sys::mlirAttributeGetType(attr), cb, data)
    });
    if crate::ir::blobs::with_bytes(a, |b| {
        h.bulk(b);
    })
    .is_some()
    {
        return true;
    }
    match crate::ir::attribute_to_tensor(a, "") {
        Ok(t) => {
            h.bulk(&crate::ir::constants::tensor_le_bytes(&t));
            true
        }
        Err(_) => false,
    }
}

/// For each op in walk order, each attribute: a dense constant's bytes, anything else printed
/// in full (an elided constant nested in an array or dictionary is then hashed too).
unsafe extern "C" fn hash_attributes(op: MlirOperation, data: *mut std::ffi::c_void) -> MlirWalkResult {
    let h = unsafe { &mut *(data as *mut Digest) };
    unsafe {
        for i in 0..mlir_sys::mlirOperationGetNumAttributes(op) {
            let attr = mlir_sys::mlirOperationGetAttribute(op, i).attribute;
            if mlir_sys::mlirAttributeIsADenseResourceElements(attr) && resource_bytes(attr, h) {
                continue;
            }
            match dense_bytes(attr) {
                Some(bytes) => {
                    h.bulk(bytes);
                }
                None => hash_printed(h, |cb, data| mlir_sys::mlirAttributePrint(attr, cb, data)),
            }
        }
    }
    mlir_sys::MlirWalkResult_MlirWalkResultAdvance
}

/// A stable identity of a (prepared) module: XXH3-64 of its generic printed form (no
/// locations, large constants elided) and of every op attribute (constants by their bytes), as
/// 16 hex digits.
pub fn model_hash(module: &Module) -> String {
    let mut h = Digest::default();
    print_structure(module, &mut |chunk| {
        h.bytes(chunk);
    });
    walk(module, hash_attributes, &mut h);
    h.hex()
}

#[cfg(test)]
mod tests {
    use super::*;
    use melior::ir::block::BlockLike;
    use melior::ir::operation::OperationLike;
    use melior::ir::RegionLike;

    fn module_with(values: &str, ty: &str) -> String {
        let ctx = crate::ir::new_context();
        let text =
            format!("func.func @main() -> {ty} {{ %0 = arith.constant dense<{values}> : {ty} return %0 : {ty} }}");
        let m = Module::parse(&ctx, &text).expect("parses");
        model_hash(&m)
    }

    #[test]
    fn every_byte_of_a_large_constant_counts() {
        let ty = "tensor<40xf32>";
        let base: Vec<String> = (0..40).map(|i| format!("{i}.5")).collect();
        let mut changed = base.clone();
        changed[37] = "37.25".into();
        let a = module_with(&format!("[{}]", base.join(", ")), ty);
        assert_eq!(
            a,
            module_with(&format!("[{}]", base.join(", ")), ty),
            "the same module, the same hash"
        );
        assert_ne!(a, module_with(&format!("[{}]", changed.join(", ")), ty));
        // the same bytes as another element type, and a splat of the first value
        assert_ne!(a, module_with(&format!("[{}]", base.join(", ")), "tensor<40xf64>"));
        assert_ne!(module_with("1.5", ty), module_with("2.5", ty));
    }

    #[test]
    fn small_and_boolean_constants_count() {
        assert_ne!(
            module_with("[1, 2, 3]", "tensor<3xi32>"),
            module_with("[1, 2, 4]", "tensor<3xi32>")
        );
        let bools = |flip: usize| {
            let v: Vec<&str> = (0..41).map(|i| if i == flip { "true" } else { "false" }).collect();
            module_with(&format!("[{}]", v.join(", ")), "tensor<41xi1>")
        };
        // bit 40 is in the sixth byte of the packed data
        assert_ne!(bools(40), bools(39));
        assert_ne!(bools(40), bools(99));
    }

    fn resource_module(values: &[f32]) -> String {
        let hex: String = values
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .map(|b| format!("{b:02X}"))
            .collect();
        let ctx = crate::ir::new_context();
        let ty = format!("tensor<{}xf32>", values.len());
        let text = format!(
            "func.func @main() -> {ty} {{ %0 = arith.constant dense_resource<w> : {ty} return %0 : {ty} }}\n\
             {{-# dialect_resources: {{ builtin: {{ w: \"0x04000000{hex}\" }} }} #-}}"
        );
        let m = Module::parse(&ctx, &text).expect("parses");
        model_hash(&m)
    }

    /// The hash of a module whose constant is a blob mapped from a file of `values`.
    fn mapped_module(values: &[f32]) -> String {
        use melior::ir::attribute::AttributeLike;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("w.bin");
        std::fs::write(&p, values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
        let file = crate::ir::blobs::MappedFile::open(&p).unwrap();
        let ctx = crate::ir::new_context();
        let ty = format!("tensor<{}xf32>", values.len());
        let text = format!("func.func @main() -> {ty} {{ %0 = arith.constant dense<0.0> : {ty} return %0 : {ty} }}");
        let m = Module::parse(&ctx, &text).expect("parses");
        let func = m.body().first_operation().unwrap();
        let constant = func
            .region(0)
            .unwrap()
            .first_block()
            .unwrap()
            .first_operation()
            .unwrap();
        let attr = constant.attribute("value").unwrap();
        let mapped = crate::ir::blobs::mapped_attribute(attr.r#type(), "w", &file, 0, values.len() * 4, 4).unwrap();
        let name = melior::StringRef::new("value");
        unsafe { mlir_sys::mlirOperationSetAttributeByName(constant.to_raw(), name.to_raw(), mapped.to_raw()) };
        model_hash(&m)
    }

    #[test]
    fn resource_constants_count_by_their_bytes() {
        let base: Vec<f32> = (0..40).map(|i| i as f32 + 0.5).collect();
        let mut changed = base.clone();
        changed[37] = 37.25;
        assert_eq!(resource_module(&base), resource_module(&base));
        assert_ne!(resource_module(&base), resource_module(&changed));
        assert_eq!(mapped_module(&base), mapped_module(&base));
        assert_ne!(mapped_module(&base), mapped_module(&changed));
    }
}
