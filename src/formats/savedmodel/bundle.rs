//! TensorFlow's TensorBundle (`variables/variables.index` + `variables.data-NNNNN-of-NNNNN`):
//! the index is an SSTable (LevelDB's table format) mapping checkpoint keys to
//! `BundleEntryProto`s (dtype, shape, shard, offset, size, masked CRC32C); the shards hold
//! the raw little-endian tensor bytes.
//!
//! Everything is checked: the table's magic number, every block's CRC32C, every entry's
//! bounds, and each tensor's CRC32C when it is read. A corrupted index, a missing shard or a
//! tensor whose bytes do not match its checksum is an error naming the file and the key.

use super::proto::TensorShapeProto;
use crate::tensor::{DType, Tensor};
use prost::Message;
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// LevelDB's table magic number, the last 8 bytes of the index.
const TABLE_MAGIC: u64 = 0xdb4775248b80fb57;
const FOOTER_LEN: usize = 48;
const BLOCK_TRAILER_LEN: usize = 5;
const CORRUPTED: &str = "checksum mismatch: the shard is corrupted";

#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("{path}: cannot read: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: not a valid TensorBundle index: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("{path}: tensor '{key}': {reason}")]
    Tensor { path: PathBuf, key: String, reason: String },
    #[error("{path}: no tensor '{key}' in the bundle")]
    UnknownKey { path: PathBuf, key: String },
}

/// BundleHeaderProto.
#[derive(Clone, PartialEq, Message)]
pub struct BundleHeader {
    #[prost(int32, tag = "1")]
    pub num_shards: i32,
    /// 0 = little endian, 1 = big endian.
    #[prost(int32, tag = "2")]
    pub endianness: i32,
}

/// BundleEntryProto.
#[derive(Clone, PartialEq, Message)]
pub struct BundleEntry {
    /// TensorFlow's DataType enum.
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    #[prost(message, optional, tag = "2")]
    pub shape: Option<TensorShapeProto>,
    #[prost(int32, tag = "3")]
    pub shard_id: i32,
    #[prost(int64, tag = "4")]
    pub offset: i64,
    #[prost(int64, tag = "5")]
    pub size: i64,
    /// Masked CRC32C of the tensor's bytes.
    #[prost(fixed32, tag = "6")]
    pub crc32c: u32,
    /// Partitioned variables: not supported (their presence is an error when read).
    #[prost(bytes = "vec", repeated, tag = "7")]
    pub slices: Vec<Vec<u8>>,
}

/// The element type of TensorFlow's DataType enum value, for the numeric types quantir reads.
pub fn tf_dtype(t: i32) -> Option<DType> {
    Some(match t {
        1 => DType::F32,
        2 => DType::F64,
        3 => DType::I32,
        4 => DType::U8,
        5 => DType::I16,
        6 => DType::I8,
        9 => DType::I64,
        10 => DType::I1,
        14 => DType::BF16,
        17 => DType::U16,
        19 => DType::F16,
        22 => DType::U32,
        23 => DType::U64,
        _ => return None,
    })
}

/// LevelDB's CRC mask: stored checksums are rotated and offset so that a CRC of data that
/// itself holds CRCs stays informative.
pub fn mask_crc(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

fn varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// The entries of one block (key, value), prefix-compressed keys expanded.
/// A key and its value in a table block.
type Entry = (Vec<u8>, Vec<u8>);

fn block_entries(block: &[u8]) -> Result<Vec<Entry>, String> {
    let n = block.len();
    if n < 4 {
        return Err("block shorter than its restart count".into());
    }
    let restarts = u32::from_le_bytes(block[n - 4..].try_into().unwrap_or([0; 4])) as usize;
    let data_end = n
        .checked_sub(4 + 4 * restarts)
        .ok_or_else(|| format!("{restarts} restart points do not fit a block of {n} bytes"))?;
    let mut out = Vec::new();
    let mut pos = 0usize;
    let mut key: Vec<u8> = Vec::new();
    while pos < data_end {
        let at = pos;
        let bad = move || format!("entry at byte {at} of a block is truncated");
        let shared = varint(block, &mut pos).ok_or_else(bad)? as usize;
        let non_shared = varint(block, &mut pos).ok_or_else(bad)? as usize;
        let vlen = varint(block, &mut pos).ok_or_else(bad)? as usize;
        if shared > key.len() || pos + non_shared + vlen > data_end {
            return Err(format!("entry at byte {pos} of a block points outside it"));
        }
        key.truncate(shared);
        key.extend_from_slice(&block[pos..pos + non_shared]);
        pos += non_shared;
        out.push((key.clone(), block[pos..pos + vlen].to_vec()));
        pos += vlen;
    }
    Ok(out)
}

/// A block of the table at (offset, size), its trailer's CRC checked.
fn read_block(file: &[u8], handle: (u64, u64)) -> Result<&[u8], String> {
    let (off, size) = (handle.0 as usize, handle.1 as usize);
    let end = off
        .checked_add(size)
        .and_then(|e| e.checked_add(BLOCK_TRAILER_LEN))
        .filter(|&e| e <= file.len())
        .ok_or_else(|| format!("block at {off}+{size} lies beyond the file's {} bytes", file.len()))?;
    let contents = &file[off..off + size];
    let kind = file[off + size];
    let stored = u32::from_le_bytes(file[off + size + 1..end].try_into().unwrap_or([0; 4]));
    let crc = crc32c::crc32c_append(crc32c::crc32c(contents), &[kind]);
    if mask_crc(crc) != stored {
        return Err(format!("block at byte {off}: checksum mismatch"));
    }
    match kind {
        0 => Ok(contents),
        1 => Err(format!(
            "block at byte {off} is Snappy-compressed, which quantir does not read"
        )),
        k => Err(format!("block at byte {off} has unknown compression type {k}")),
    }
}

fn handle(buf: &[u8], pos: &mut usize) -> Option<(u64, u64)> {
    Some((varint(buf, pos)?, varint(buf, pos)?))
}

/// An opened bundle: every entry of the index, read once.
#[derive(Debug, Clone)]
pub struct Bundle {
    prefix: PathBuf,
    index_path: PathBuf,
    pub num_shards: usize,
    pub entries: BTreeMap<String, BundleEntry>,
}

impl Bundle {
    /// Opens the bundle at `prefix` (`.../variables/variables`: reads `prefix.index`).
    pub fn open(prefix: &Path) -> Result<Bundle, BundleError> {
        let index_path = PathBuf::from(format!("{}.index", prefix.display()));
        let file = std::fs::read(&index_path).map_err(|source| BundleError::Io {
            path: index_path.clone(),
            source,
        })?;
        let corrupt = |reason: String| BundleError::Corrupt {
            path: index_path.clone(),
            reason,
        };
        if file.len() < FOOTER_LEN {
            return Err(corrupt(format!("{} bytes, shorter than a table footer", file.len())));
        }
        let footer = &file[file.len() - FOOTER_LEN..];
        let magic = u64::from_le_bytes(footer[40..48].try_into().unwrap_or([0; 8]));
        if magic != TABLE_MAGIC {
            return Err(corrupt("wrong magic number".into()));
        }
        let mut pos = 0;
        let _metaindex = handle(footer, &mut pos).ok_or_else(|| corrupt("bad footer".into()))?;
        let index = handle(footer, &mut pos).ok_or_else(|| corrupt("bad footer".into()))?;
        let index_block = read_block(&file, index).map_err(corrupt)?;
        let mut entries = BTreeMap::new();
        let mut header: Option<BundleHeader> = None;
        for (_, h) in block_entries(index_block).map_err(corrupt)? {
            let mut p = 0;
            let data = handle(&h, &mut p).ok_or_else(|| corrupt("bad block handle in the index".into()))?;
            let block = read_block(&file, data).map_err(corrupt)?;
            for (k, v) in block_entries(block).map_err(corrupt)? {
                let key = String::from_utf8(k).map_err(|_| corrupt("a key is not UTF-8".into()))?;
                if key.is_empty() {
                    header = Some(BundleHeader::decode(v.as_slice()).map_err(|e| corrupt(format!("header: {e}")))?);
                    continue;
                }
                let e = BundleEntry::decode(v.as_slice()).map_err(|e| corrupt(format!("entry '{key}': {e}")))?;
                entries.insert(key, e);
            }
        }
        let header = header.ok_or_else(|| corrupt("no bundle header".into()))?;
        if header.endianness != 0 {
            return Err(corrupt("big-endian bundles are not supported".into()));
        }
        Ok(Bundle {
            prefix: prefix.to_path_buf(),
            index_path,
            num_shards: header.num_shards.max(1) as usize,
            entries,
        })
    }

    /// The shard file of shard `id`.
    pub fn shard_path(&self, id: usize) -> PathBuf {
        PathBuf::from(format!(
            "{}.data-{id:05}-of-{:05}",
            self.prefix.display(),
            self.num_shards
        ))
    }

    /// The entry of `key` and its bytes from the shard (their checksum is the caller's: it
    /// covers different bytes for numeric and string tensors).
    fn read_bytes(&self, key: &str) -> Result<(&BundleEntry, Vec<u8>, PathBuf), BundleError> {
        let e = self.entries.get(key).ok_or_else(|| BundleError::UnknownKey {
            path: self.index_path.clone(),
            key: key.into(),
        })?;
        let shard = self.shard_path(e.shard_id.max(0) as usize);
        let err = |reason: String| BundleError::Tensor {
            path: shard.clone(),
            key: key.into(),
            reason,
        };
        if !e.slices.is_empty() {
            return Err(err("partitioned (sliced) variables are not supported".into()));
        }
        if e.size < 0 || e.offset < 0 {
            return Err(err(format!("negative size {} or offset {}", e.size, e.offset)));
        }
        let mut f = std::fs::File::open(&shard).map_err(|x| err(format!("shard missing or unreadable: {x}")))?;
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if (e.offset as u64).saturating_add(e.size as u64) > len {
            return Err(err(format!(
                "{} bytes at offset {} lie beyond the shard's {len} bytes",
                e.size, e.offset
            )));
        }
        let mut bytes = vec![0u8; e.size as usize];
        f.seek(SeekFrom::Start(e.offset as u64))
            .and_then(|_| f.read_exact(&mut bytes))
            .map_err(|x| err(format!("cannot read {} bytes at offset {}: {x}", e.size, e.offset)))?;
        Ok((e, bytes, shard))
    }

    /// The fully known shape of an entry.
    fn shape_of(e: &BundleEntry) -> Option<Vec<usize>> {
        match &e.shape {
            Some(s) => s.dims()?.into_iter().map(|d| d.map(|d| d as usize)).collect(),
            None => Some(vec![]),
        }
    }

    /// Reads tensor `key`, checking its size against dtype × shape and its CRC32C.
    pub fn read(&self, key: &str) -> Result<Tensor, BundleError> {
        let (e, bytes, shard) = self.read_bytes(key)?;
        let err = |reason: String| BundleError::Tensor {
            path: shard.clone(),
            key: key.into(),
            reason,
        };
        if mask_crc(crc32c::crc32c(&bytes)) != e.crc32c {
            return Err(err(CORRUPTED.into()));
        }
        let dtype =
            tf_dtype(e.dtype).ok_or_else(|| err(format!("TensorFlow data type {} is not supported", e.dtype)))?;
        let shape = Self::shape_of(e).ok_or_else(|| err("shape is not fully known".into()))?;
        let n = crate::tensor::element_count(&shape).ok_or_else(|| err(format!("shape {shape:?} is too large")))?;
        if n.checked_mul(dtype.size_bytes()) != Some(bytes.len()) {
            return Err(err(format!("{} bytes recorded for {n} elements of {dtype}", e.size)));
        }
        crate::ir::constants::tensor_from_le(dtype, &shape, &bytes, key).map_err(|x| err(x.to_string()))
    }

    /// Reads the string tensor `key` (DT_STRING), flattened. The bundle stores the lengths
    /// as varints, then a masked CRC32C of the lengths (each as a little-endian u32), then
    /// the bytes of every string; the entry's checksum covers the lengths as u32s, the
    /// length checksum and the strings.
    pub fn read_strings(&self, key: &str) -> Result<Vec<Vec<u8>>, BundleError> {
        const DT_STRING: i32 = 7;
        let (e, bytes, shard) = self.read_bytes(key)?;
        let err = |reason: String| BundleError::Tensor {
            path: shard.clone(),
            key: key.into(),
            reason,
        };
        if e.dtype != DT_STRING {
            return Err(err(format!("TensorFlow data type {} is not a string", e.dtype)));
        }
        let shape = Self::shape_of(e).ok_or_else(|| err("shape is not fully known".into()))?;
        // every string takes at least its one-byte length
        let n = crate::tensor::element_count(&shape)
            .filter(|&n| n <= bytes.len())
            .ok_or_else(|| err(format!("{} bytes cannot hold {shape:?} strings", bytes.len())))?;
        let mut pos = 0;
        let mut lens = Vec::with_capacity(n);
        let mut crc = 0u32;
        for _ in 0..n {
            let l = varint(&bytes, &mut pos).ok_or_else(|| err("truncated string lengths".into()))?;
            // TensorFlow checksums each length as its low 4 bytes (it refuses longer strings)
            let l = u32::try_from(l).map_err(|_| err("a string longer than 4 GiB".into()))?;
            crc = crc32c::crc32c_append(crc, &l.to_le_bytes());
            lens.push(l as usize);
        }
        let stored = bytes
            .get(pos..pos + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(|| err("truncated length checksum".into()))?;
        if mask_crc(crc) != stored {
            return Err(err(CORRUPTED.into()));
        }
        crc = crc32c::crc32c_append(crc, &stored.to_le_bytes());
        pos += 4;
        let mut out = Vec::with_capacity(n);
        for l in lens {
            let s = bytes
                .get(pos..pos.saturating_add(l))
                .ok_or_else(|| err("a string runs past the tensor's bytes".into()))?;
            crc = crc32c::crc32c_append(crc, s);
            out.push(s.to_vec());
            pos += l;
        }
        if pos != bytes.len() {
            return Err(err(format!("{} bytes left after the last string", bytes.len() - pos)));
        }
        if mask_crc(crc) != e.crc32c {
            return Err(err(CORRUPTED.into()));
        }
        Ok(out)
    }
}
