//! Constants whose bytes stay in their file: `dense_resource` attributes over a read-only map
//! of an ONNX external-data file, instead of a copy in the context's memory.
//!
//! A `DenseElementsAttr` copies its data into the context, and the interpreter then holds its
//! own copy of every weight to calibrate: a model's weights were in memory twice (BERT-base:
//! 2 × 340 MB). A mapped constant is
//!
//! ```mlir
//! %w = "onnx.Constant"() {value = dense_resource<layer0.q.weight> : tensor<768x768xf32>}
//! ```
//!
//! whose blob points into the mapped file. Reading it ([`with_bytes`]) lets go of the pages it
//! touched afterwards (`MADV_DONTNEED`: the kernel keeps them in its page cache, and a later
//! read maps them again), so the bytes are resident only while a reader copies or hashes them.
//!
//! The C API has no raw-data accessor for resource blobs, so the blobs made here are kept in a
//! registry (attribute → bytes) that their deleter empties when the context drops them.

use melior::ir::attribute::AttributeLike;
use melior::ir::{Attribute, Type, TypeLike};
use memmap2::Mmap;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

/// A file mapped read-only, shared by the blobs that point into it; unmapped when the last of
/// them is deleted.
#[derive(Clone)]
pub struct MappedFile(Arc<Mmap>);

impl MappedFile {
    /// Maps `path` read-only.
    pub fn open(path: &Path) -> std::io::Result<MappedFile> {
        let f = std::fs::File::open(path)?;
        // Safety: the map is read-only and private; a file truncated by another process while
        // mapped would fault on access, as every mmap-based model loader does (onnxruntime's
        // external data among them). quantir's own writes replace files by rename, which
        // leaves a mapped inode as it was.
        let map = unsafe { Mmap::map(&f)? };
        Ok(MappedFile(Arc::new(map)))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Where a registered blob's bytes are: the map and the range in it.
struct Blob {
    file: Arc<Mmap>,
    offset: usize,
    len: usize,
}

/// Registered blobs by attribute pointer. An attribute lives as long as its context, and the
/// blob's deleter (run when the context is destroyed) removes the entry before the address
/// can be reused.
fn registry() -> &'static Mutex<HashMap<usize, Blob>> {
    static R: OnceLock<Mutex<HashMap<usize, Blob>>> = OnceLock::new();
    R.get_or_init(Default::default)
}

fn lock() -> std::sync::MutexGuard<'static, HashMap<usize, Blob>> {
    // a panic while the lock was held cannot leave an entry half-written: insert and remove
    // are single calls
    registry().lock().unwrap_or_else(|p| p.into_inner())
}

/// What the deleter gets: the data pointer it removes entries by, and one reference to the map.
struct Owner {
    data: usize,
    _file: Arc<Mmap>,
}

unsafe extern "C" fn delete_blob(
    user: *mut std::ffi::c_void,
    _data: *const std::ffi::c_void,
    _size: usize,
    _align: usize,
) {
    // Safety: `user` is the `Box<Owner>` leaked in `mapped_attribute`, handed back once
    let owner = unsafe { Box::from_raw(user as *mut Owner) };
    lock().retain(|_, b| b.file.as_ptr() as usize + b.offset != owner.data);
}

/// A `dense_resource` attribute of type `ty` over `len` bytes of `file` at `offset`, named
/// `name` (MLIR makes the name unique), or `None` when the range is outside the file or not
/// aligned to the element size (the caller then copies the bytes into a dense attribute).
/// The bytes are read as little-endian elements, as ONNX stores them.
pub fn mapped_attribute<'c>(
    ty: Type<'c>,
    name: &str,
    file: &MappedFile,
    offset: usize,
    len: usize,
    elem_size: usize,
) -> Option<Attribute<'c>> {
    if cfg!(target_endian = "big") || elem_size == 0 || len == 0 {
        return None;
    }
    let end = offset.checked_add(len)?;
    if end > file.len() {
        return None;
    }
    let data = file.0.as_ptr() as usize + offset;
    if data % elem_size != 0 {
        return None;
    }
    let owner = Box::into_raw(Box::new(Owner {
        data,
        _file: file.0.clone(),
    }));
    let name_ref = melior::StringRef::new(name);
    let attr = unsafe {
        Attribute::from_raw(mlir_sys::mlirUnmanagedDenseResourceElementsAttrGet(
            ty.to_raw(),
            name_ref.to_raw(),
            data as *mut std::ffi::c_void,
            len,
            elem_size,
            false,
            Some(delete_blob),
            owner as *mut std::ffi::c_void,
        ))
    };
    lock().insert(
        attr.to_raw().ptr as usize,
        Blob {
            file: file.0.clone(),
            offset,
            len,
        },
    );
    Some(attr)
}

/// True when `attr` is a blob made by [`mapped_attribute`].
pub fn is_mapped(attr: Attribute) -> bool {
    lock().contains_key(&(attr.to_raw().ptr as usize))
}

/// Calls `f` with the bytes of a mapped blob (`None` for any other attribute), then lets go
/// of the whole pages of the range it read.
pub fn with_bytes<R>(attr: Attribute, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
    let (file, offset, len) = {
        let reg = lock();
        let b = reg.get(&(attr.to_raw().ptr as usize))?;
        (b.file.clone(), b.offset, b.len)
    };
    let r = f(&file[offset..offset + len]);
    release(&file, offset, len);
    Some(r)
}

/// `MADV_DONTNEED` over the whole pages inside `offset..offset + len`: they leave this
/// process's resident set; the data stays in the file and in the kernel's page cache.
fn release(file: &Mmap, offset: usize, len: usize) {
    let page = page_size();
    let start = offset.div_ceil(page) * page;
    let end = (offset + len) / page * page;
    if end > start {
        // Safety: the map is read-only and file-backed, so dropping its pages loses nothing;
        // no reference into them outlives `with_bytes`'s call of `f`. A failure only leaves
        // the pages resident.
        let _ = unsafe { file.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start) };
    }
}

fn page_size() -> usize {
    static P: OnceLock<usize> = OnceLock::new();
    // Safety: sysconf has no preconditions
    *P.get_or_init(|| match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as usize,
        _ => 4096,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;
    use std::io::Write;

    fn file_with(bytes: &[u8]) -> (tempfile::TempDir, MappedFile) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("w.data");
        std::fs::File::create(&p).unwrap().write_all(bytes).unwrap();
        let m = MappedFile::open(&p).unwrap();
        (dir, m)
    }

    #[test]
    fn a_mapped_constant_reads_back_its_bytes_and_leaves_the_registry_with_its_context() {
        let values: Vec<f32> = (0..2048).map(|i| i as f32 * 0.25 - 3.0).collect();
        let mut bytes = vec![0u8; 8];
        bytes.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        let (_dir, file) = file_with(&bytes);
        let key;
        {
            let ctx = crate::ir::new_context();
            let f32_ty = crate::ir::types::dtype_to_type(&ctx, crate::tensor::DType::F32);
            let ty = crate::ir::types::tensor_type_of(f32_ty, Some(&[Some(32), Some(64)]));
            let attr = mapped_attribute(ty, "w", &file, 8, values.len() * 4, 4).unwrap();
            key = attr.to_raw().ptr as usize;
            assert!(is_mapped(attr));
            let t = crate::ir::attribute_to_tensor(attr, "w").unwrap();
            let want = ndarray::ArrayD::from_shape_vec(vec![32, 64], values.clone()).unwrap();
            assert!(t.bit_eq(&Tensor::F32(want)));
            // a range past the end, or misaligned for its elements, is not mapped
            assert!(mapped_attribute(ty, "x", &file, 12, values.len() * 4, 4).is_none());
            assert!(mapped_attribute(ty, "x", &file, 9, 4 * 4, 4).is_none());
        }
        assert!(!lock().contains_key(&key), "the context's end runs the deleter");
    }
}
