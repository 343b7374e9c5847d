//! Arrays read row by row from `.npy` files and from the entries of `.npz` archives (stored or
//! deflated), so that a calibration set never sits in memory whole: only its header is read
//! when the data set is opened, and each sample's row when that sample runs.
//!
//! Rows are read forwards through one decoder; asking for an earlier row reopens the entry.
//! Samples are requested in ascending order (the runner reads each chunk's rows in order), so
//! every byte is decoded once.

use crate::tensor::{DType, Tensor};
use ndarray::{ArrayD, IxDyn};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Where the `.npy` bytes of an array are.
#[derive(Debug, Clone)]
struct Location {
    offset: u64,
    len: u64,
    deflated: bool,
}

struct Cursor {
    reader: Box<dyn Read + Send>,
    next_row: usize,
}

/// One array of an `.npy` file or `.npz` entry, read lazily.
pub struct LazyArray {
    pub path: PathBuf,
    pub dtype: DType,
    pub shape: Vec<usize>,
    at: Location,
    /// Bytes from the start of the `.npy` data to the first element.
    header_len: usize,
    cursor: Mutex<Option<Cursor>>,
}

impl std::fmt::Debug for LazyArray {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "LazyArray({} {}{:?})", self.path.display(), self.dtype, self.shape)
    }
}

/// The element type of a little-endian (or byte-sized) `descr`.
fn dtype_of(descr: &str) -> Option<(DType, usize)> {
    Some(match descr {
        "<f4" => (DType::F32, 4),
        "<f8" => (DType::F64, 8),
        "<f2" => (DType::F16, 2),
        "<i8" => (DType::I64, 8),
        "<i4" => (DType::I32, 4),
        "<i2" => (DType::I16, 2),
        "<u2" => (DType::U16, 2),
        "<u4" => (DType::U32, 4),
        "<u8" => (DType::U64, 8),
        "|u1" => (DType::U8, 1),
        "|i1" => (DType::I8, 1),
        "|b1" => (DType::I1, 1),
        _ => return None,
    })
}

/// Parses the `.npy` header at the start of `r`: (dtype, shape, header length in bytes).
/// `None` for a form this reader does not stream (Fortran order, big-endian, structured).
fn parse_header(r: &mut dyn Read) -> Result<Option<(DType, Vec<usize>, usize)>, String> {
    let mut pre = [0u8; 10];
    r.read_exact(&mut pre)
        .map_err(|e| format!("truncated .npy header: {e}"))?;
    if &pre[..6] != b"\x93NUMPY" {
        return Err("not an .npy array (bad magic)".into());
    }
    let (len, fixed) = match pre[6] {
        1 => (u16::from_le_bytes([pre[8], pre[9]]) as usize, 10),
        2 | 3 => {
            let mut more = [0u8; 2];
            r.read_exact(&mut more).map_err(|e| e.to_string())?;
            (u32::from_le_bytes([pre[8], pre[9], more[0], more[1]]) as usize, 12)
        }
        v => return Err(format!("unsupported .npy version {v}")),
    };
    let mut text = vec![0u8; len];
    r.read_exact(&mut text)
        .map_err(|e| format!("truncated .npy header: {e}"))?;
    let text = String::from_utf8_lossy(&text);
    // numpy writes one flat dict ({'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), });
    // anything nested (a structured dtype, a damaged file) is refused here: it would go on to
    // ndarray-npy's header parser, whose backtracking is exponential in the nesting (a fuzzed
    // 135-byte header took seconds there)
    let count = |c: char| text.matches(c).count();
    if count('{') > 1 || count('[') > 0 || count('(') > 1 {
        let shown: String = text.trim_end().escape_debug().take(120).collect();
        return Err(format!(
            "unsupported .npy header (not one flat dict: a structured dtype or a damaged file): {shown}"
        ));
    }
    let field = |key: &str| -> Option<&str> {
        let at = text.find(&format!("'{key}'"))? + key.len() + 2;
        Some(text[at..].trim_start().strip_prefix(':')?.trim_start())
    };
    let descr = field("descr").and_then(|v| v.strip_prefix('\'')?.split('\'').next());
    let fortran = field("fortran_order").is_some_and(|v| v.starts_with("True"));
    let shape = field("shape")
        .and_then(|v| v.strip_prefix('(')?.split(')').next())
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| s.trim_end_matches('L').parse::<usize>())
                .collect::<Result<Vec<_>, _>>()
        });
    let (Some(descr), Some(Ok(shape))) = (descr, shape) else {
        return Err(format!("unreadable .npy header: {text}"));
    };
    match dtype_of(descr) {
        Some((dtype, _)) if !fortran => Ok(Some((dtype, shape, fixed + len))),
        _ => Ok(None),
    }
}

impl LazyArray {
    fn open_at(path: &Path, at: Location) -> Result<Option<LazyArray>, String> {
        let mut r = Self::raw_reader(path, &at).map_err(|e| e.to_string())?;
        let Some((dtype, shape, header_len)) = parse_header(&mut r)? else {
            return Ok(None);
        };
        // a header may declare any shape: check it against the bytes there are before any
        // buffer is sized from it (a deflated entry holds at most ~1032× its compressed size)
        let declared = shape
            .iter()
            .try_fold(dtype.size_bytes() as u64, |n, &d| n.checked_mul(d as u64));
        let room = if at.deflated {
            at.len.saturating_mul(1032).saturating_add(1 << 12)
        } else {
            at.len
        }
        .saturating_sub(header_len as u64);
        match declared {
            Some(bytes) if bytes <= room => {}
            _ => {
                return Err(format!(
                    "the header declares shape {shape:?} of {dtype}, more data than the file holds ({room} bytes)"
                ))
            }
        }
        Ok(Some(LazyArray {
            path: path.into(),
            dtype,
            shape,
            at,
            header_len,
            cursor: Mutex::new(None),
        }))
    }

    /// An `.npy` file; `None` when its form is not streamed (read it eagerly then).
    pub fn open_npy(path: &Path) -> Result<Option<LazyArray>, String> {
        let len = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
        Self::open_at(
            path,
            Location {
                offset: 0,
                len,
                deflated: false,
            },
        )
    }

    /// Every entry of an `.npz` archive as (name without `.npy`, array); `None` when one entry
    /// is not streamed (read the archive eagerly then).
    pub fn open_npz(path: &Path) -> Result<Option<Vec<(String, LazyArray)>>, String> {
        let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
        let mut zip = zip::ZipArchive::new(f).map_err(|e| format!("not an .npz file ({e})"))?;
        let mut out = Vec::new();
        for i in 0..zip.len() {
            let (name, at) = {
                let e = zip.by_index_raw(i).map_err(|e| e.to_string())?;
                let deflated = match e.compression() {
                    zip::CompressionMethod::Stored => false,
                    zip::CompressionMethod::Deflated => true,
                    _ => return Ok(None),
                };
                (
                    e.name().trim_end_matches(".npy").to_string(),
                    Location {
                        offset: e.data_start(),
                        len: e.compressed_size(),
                        deflated,
                    },
                )
            };
            match Self::open_at(path, at).map_err(|e| format!("array '{name}': {e}"))? {
                Some(a) => out.push((name, a)),
                None => return Ok(None),
            }
        }
        Ok(Some(out))
    }

    fn raw_reader(path: &Path, at: &Location) -> std::io::Result<Box<dyn Read + Send>> {
        let mut f = std::fs::File::open(path)?;
        f.seek(SeekFrom::Start(at.offset))?;
        let limited = std::io::BufReader::with_capacity(1 << 16, f.take(at.len));
        Ok(if at.deflated {
            Box::new(flate2::read::DeflateDecoder::new(limited))
        } else {
            Box::new(limited)
        })
    }

    fn row_elems(&self) -> usize {
        self.shape.iter().skip(1).product()
    }

    fn item_size(&self) -> usize {
        match self.dtype {
            d => d.size_bytes(),
        }
    }

    /// Rows `[i, i + n)` as one tensor of shape `dims` (`[n, ...]`, or a row's own shape when
    /// `n` is 1). The bytes are read straight into the tensor's buffer: a sample of a calibration
    /// set is copied once, from the file, not once more per conversion or reshape.
    fn read_rows(&self, i: usize, n: usize, dims: IxDyn) -> Result<Tensor, String> {
        let rows = self.shape.first().copied().unwrap_or(0);
        if i + n > rows {
            return Err(format!("rows {i}..{} of {rows}", i + n));
        }
        let row_bytes = self.row_elems() * self.item_size();
        let mut guard = self
            .cursor
            .lock()
            .map_err(|_| "reader poisoned by a panic".to_string())?;
        if guard.as_ref().is_none_or(|c| c.next_row > i) {
            let mut reader = Self::raw_reader(&self.path, &self.at).map_err(|e| e.to_string())?;
            std::io::copy(&mut (&mut reader).take(self.header_len as u64), &mut std::io::sink())
                .map_err(|e| e.to_string())?;
            *guard = Some(Cursor { reader, next_row: 0 });
        }
        let c = guard.as_mut().ok_or("no reader")?;
        let skip = ((i - c.next_row) * row_bytes) as u64;
        let skipped =
            std::io::copy(&mut (&mut c.reader).take(skip), &mut std::io::sink()).map_err(|e| e.to_string())?;
        if skipped != skip {
            return Err("the file ends before its declared shape".into());
        }
        let len = n * self.row_elems();
        let mut read = |bytes: &mut [u8]| {
            c.reader
                .read_exact(bytes)
                .map_err(|e| format!("the file ends before its declared shape ({e})"))
        };
        let tensor = match self.dtype {
            DType::F32 => Tensor::F32(shaped(dims, read_le(len, &mut read, f32::from_le_bytes)?)?),
            DType::F64 => Tensor::F64(shaped(dims, read_le(len, &mut read, f64::from_le_bytes)?)?),
            DType::I64 => Tensor::I64(shaped(dims, read_le(len, &mut read, i64::from_le_bytes)?)?),
            DType::I32 => Tensor::I32(shaped(dims, read_le(len, &mut read, i32::from_le_bytes)?)?),
            DType::I16 => Tensor::I16(shaped(dims, read_le(len, &mut read, i16::from_le_bytes)?)?),
            DType::U16 => Tensor::U16(shaped(dims, read_le(len, &mut read, u16::from_le_bytes)?)?),
            DType::U32 => Tensor::U32(shaped(dims, read_le(len, &mut read, u32::from_le_bytes)?)?),
            DType::U64 => Tensor::U64(shaped(dims, read_le(len, &mut read, u64::from_le_bytes)?)?),
            DType::F16 => {
                let bits = read_le(len, &mut read, u16::from_le_bytes)?;
                Tensor::F16(shaped(dims, bits.into_iter().map(half::f16::from_bits).collect())?)
            }
            DType::U8 => Tensor::U8(shaped(dims, read_le(len, &mut read, u8::from_le_bytes)?)?),
            DType::I8 => Tensor::I8(shaped(dims, read_le(len, &mut read, i8::from_le_bytes)?)?),
            DType::I1 => {
                let bytes = read_le(len, &mut read, u8::from_le_bytes)?;
                Tensor::I1(shaped(dims, bytes.into_iter().map(|b| b != 0).collect())?)
            }
            other => return Err(format!("dtype {other} is not streamed")),
        };
        c.next_row = i + n;
        Ok(tensor)
    }

    /// Row `i` without its first axis.
    pub fn row(&self, i: usize) -> Result<Tensor, String> {
        // (a 0-d array has no rows: read_rows says so)
        self.read_rows(i, 1, IxDyn(self.shape.get(1..).unwrap_or_default()))
    }

    /// The whole array (labels, small arrays).
    pub fn load(&self) -> Result<Tensor, String> {
        self.read_rows(0, self.shape.first().copied().unwrap_or(0), IxDyn(&self.shape))
    }
}

/// `len` little-endian values of `T` read by `read` into one buffer, which becomes the tensor's:
/// the bytes land in place and are byte-swapped there only on a big-endian machine.
fn read_le<T: bytemuck::Pod, const K: usize>(
    len: usize,
    read: &mut dyn FnMut(&mut [u8]) -> Result<(), String>,
    from_le: fn([u8; K]) -> T,
) -> Result<Vec<T>, String> {
    let mut v = vec![T::zeroed(); len];
    read(bytemuck::cast_slice_mut(&mut v))?;
    if cfg!(target_endian = "big") {
        for x in &mut v {
            let mut b = [0u8; K];
            b.copy_from_slice(bytemuck::bytes_of(x));
            *x = from_le(b);
        }
    }
    Ok(v)
}

fn shaped<T>(dims: IxDyn, v: Vec<T>) -> Result<ArrayD<T>, String> {
    ArrayD::from_shape_vec(dims, v).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(dict: &str) -> Vec<u8> {
        let mut h = b"\x93NUMPY\x01\x00".to_vec();
        h.extend((dict.len() as u16).to_le_bytes());
        h.extend(dict.as_bytes());
        h
    }

    #[test]
    fn a_flat_header_is_read_and_a_nested_one_refused_before_ndarray_npy_sees_it() {
        let ok = header("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }\n");
        let (dtype, shape, len) = parse_header(&mut ok.as_slice()).unwrap().unwrap();
        assert_eq!((dtype, shape, len), (DType::F32, vec![3, 2], ok.len()));
        // big-endian: not streamed, read whole by ndarray-npy
        let be = header("{'descr': '>f4', 'fortran_order': False, 'shape': (3,), }\n");
        assert!(parse_header(&mut be.as_slice()).unwrap().is_none());
        // the header libFuzzer found taking seconds (tests/data/fuzz_crashes/npy/)
        let slow = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/fuzz_crashes/npy/nested_header_slow_parse"
        ))
        .unwrap();
        let e = parse_header(&mut slow.as_slice()).unwrap_err();
        assert!(e.contains("not one flat dict"), "{e}");
        let structured = header("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }\n");
        assert!(parse_header(&mut structured.as_slice()).is_err());
    }

    #[test]
    fn rows_read_in_place_equal_the_whole_array_in_any_order_stored_or_deflated() {
        use ndarray::Axis;
        use ndarray_npy::NpzWriter;
        let dir = tempfile::tempdir().unwrap();
        let f32s = ArrayD::from_shape_fn(IxDyn(&[5, 2, 3]), |i| i[0] as f32 - 0.25 * (i[1] * 3 + i[2]) as f32);
        let i64s = ArrayD::from_shape_fn(IxDyn(&[5, 2]), |i| (i[0] as i64 - 2) * 1_000_000_007 + i[1] as i64);
        let f64s = f32s.mapv(|v| f64::from(v) / 3.0);
        let u8s = i64s.mapv(|v| (v & 0xff) as u8);
        let bools = i64s.mapv(|v| v % 2 == 0);
        let whole = [
            ("a", Tensor::F32(f32s.clone())),
            ("b", Tensor::I64(i64s.clone())),
            ("c", Tensor::F64(f64s.clone())),
            ("d", Tensor::U8(u8s.clone())),
            ("e", Tensor::I1(bools.clone())),
        ];
        for compressed in [false, true] {
            let p = dir.path().join(format!("x{compressed}.npz"));
            let file = std::fs::File::create(&p).unwrap();
            let mut w = match compressed {
                true => NpzWriter::new_compressed(file),
                false => NpzWriter::new(file),
            };
            w.add_array("a", &f32s).unwrap();
            w.add_array("b", &i64s).unwrap();
            w.add_array("c", &f64s).unwrap();
            w.add_array("d", &u8s).unwrap();
            w.add_array("e", &bools).unwrap();
            w.finish().unwrap();
            let arrays = LazyArray::open_npz(&p).unwrap().expect("every entry streams");
            for ((name, lazy), (want_name, want)) in arrays.iter().zip(&whole) {
                assert_eq!(name, want_name);
                assert!(lazy.load().unwrap().bit_eq(want), "{name} whole");
                // forwards, skipping, then backwards (which reopens the entry)
                for i in [0, 2, 3, 1, 4, 0] {
                    let want_row = crate::map_tensor!(want, a => a.index_axis(Axis(0), i).to_owned());
                    let row = lazy.row(i).unwrap();
                    assert_eq!(row.shape(), &want.shape()[1..], "{name} row {i}");
                    assert!(row.bit_eq(&want_row), "{name} row {i}");
                }
                assert!(lazy.row(5).is_err());
            }
        }
        // a 0-d array has no row 0: an error, not a panic
        let p = dir.path().join("scalar.npz");
        let mut w = NpzWriter::new(std::fs::File::create(&p).unwrap());
        w.add_array("s", &ndarray::arr0(1.5f32)).unwrap();
        w.finish().unwrap();
        let arrays = LazyArray::open_npz(&p).unwrap().expect("streams");
        assert!(arrays[0].1.row(0).is_err());
    }
}
