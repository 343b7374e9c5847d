//! A global allocator that places every block of a page or more on a 64-byte boundary: the
//! system allocator's, with large layouts' alignment raised.
//!
//! Why: glibc's `malloc` aligns to 16 bytes (a large block sits 16 bytes past a page start),
//! so in a tensor of f32 values up to half of the 32-byte AVX loads and stores the kernels make
//! at multiples of 8 values (a depthwise pixel's channels, a packed GEMM panel's row) straddle
//! two cache lines, and each costs two accesses. On a 64-byte boundary none does. Alignment
//! changes where values are, not what they are: results are bit-identical either way.
//!
//! The library does not install it (a program chooses its own allocator); the `quantir`
//! command line, the Python module and the benchmarks do:
//!
//! ```ignore
//! #[global_allocator]
//! static GLOBAL: quantir::alloc::CacheAligned = quantir::alloc::CacheAligned;
//! ```

use std::alloc::{GlobalAlloc, Layout, System};

/// Blocks of at least this many bytes are cache-line aligned; smaller ones (strings, small
/// vectors, tree nodes) keep the system's alignment and its smaller overhead.
pub const ALIGNED_FROM: usize = 4096;

/// One cache line on every x86-64 and most ARM CPUs.
pub const LINE: usize = 64;

/// [`System`] with every layout of [`ALIGNED_FROM`] bytes or more aligned to [`LINE`].
#[derive(Debug, Clone, Copy, Default)]
pub struct CacheAligned;

/// Whether a block of layout `l` is placed by [`CacheAligned`] rather than by `System` as is.
fn raised(l: Layout) -> bool {
    l.size() >= ALIGNED_FROM && l.align() < LINE
}

/// The system block under a raised block of `size` bytes: `size + LINE` bytes at the system's
/// alignment (≥ 8), of which the caller's block starts at the first line boundary at least 8
/// bytes in. The 8 bytes before it hold its distance from the system block's start.
///
/// The extra line is taken through plain `malloc`, not `posix_memalign`: glibc serves aligned
/// requests of a few MB from the heap and leaves their leading gaps as holes, which raised the
/// peak memory of `quantize ppocr_det.onnx` from 77 to 127–131 MB; this way it stays the same.
///
/// `None` when `size + LINE` is more than a layout can hold: no block is made.
fn under(size: usize) -> Option<Layout> {
    Layout::from_size_align(size.checked_add(LINE)?, 8).ok()
}

/// Places a raised block in the system block at `raw` (null stays null).
unsafe fn place(raw: *mut u8) -> *mut u8 {
    if raw.is_null() {
        return raw;
    }
    let at = (raw as usize + 8).next_multiple_of(LINE) - raw as usize;
    let p = raw.add(at);
    p.cast::<usize>().sub(1).write_unaligned(at);
    p
}

/// The system block of the raised block at `p`.
unsafe fn raw_of(p: *mut u8) -> *mut u8 {
    p.sub(p.cast::<usize>().sub(1).read_unaligned())
}

// SAFETY: a block that is not raised is `System`'s as requested. A raised one lies inside a
// system block of LINE more bytes, starting on a line boundary (so at any alignment below
// LINE) with `size` bytes after it; its release and resizing find that system block again
// from the distance stored just before it, and hand `System` the layout it was made with
// (`under` of the same size).
unsafe impl GlobalAlloc for CacheAligned {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        match raised(l) {
            true => under(l.size()).map_or(std::ptr::null_mut(), |u| place(System.alloc(u))),
            false => System.alloc(l),
        }
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // calloc: fresh pages of a large block come zeroed without a pass over them
        match raised(l) {
            true => under(l.size()).map_or(std::ptr::null_mut(), |u| place(System.alloc_zeroed(u))),
            false => System.alloc_zeroed(l),
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        match raised(l) {
            // a raised block exists, so `under` of its size was a layout when it was made
            true => {
                if let Some(u) = under(l.size()) {
                    System.dealloc(raw_of(p), u)
                }
            }
            false => System.dealloc(p, l),
        }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees new_size, rounded up to l.align(), does not overflow
        let to = Layout::from_size_align_unchecked(new_size, l.align());
        if !raised(l) && !raised(to) {
            return System.realloc(p, l, new_size);
        }
        // a new block, the kept bytes copied, the old one released
        let q = self.alloc(to);
        if !q.is_null() {
            std::ptr::copy_nonoverlapping(p, q, l.size().min(new_size));
            self.dealloc(p, l);
        }
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Large blocks land on a cache line, zeroed ones are zeros, an alignment above a line is
    /// kept, and a block that grows (across the threshold and within it) or shrinks keeps its
    /// bytes and lands on a line while it is large.
    #[test]
    fn large_blocks_start_on_a_cache_line_and_keep_their_bytes() {
        let a = CacheAligned;
        unsafe {
            for size in [ALIGNED_FROM, 12_345, 800_000, 3 << 20] {
                let l = Layout::from_size_align(size, 4).unwrap();
                let blocks: Vec<*mut u8> = (0..8).map(|_| a.alloc(l)).collect();
                for &p in &blocks {
                    assert!(!p.is_null());
                    assert_eq!(p as usize % LINE, 0, "{size} bytes");
                }
                let z = a.alloc_zeroed(l);
                assert_eq!(z as usize % LINE, 0);
                assert!(std::slice::from_raw_parts(z, size).iter().all(|&b| b == 0));
                a.dealloc(z, l);
                for p in blocks {
                    a.dealloc(p, l);
                }
            }
            // a size that leaves no room for the extra line is refused, not served short
            let huge = Layout::from_size_align(isize::MAX as usize - 8, 4).unwrap();
            assert!(a.alloc(huge).is_null());
            assert!(a.alloc_zeroed(huge).is_null());
            let page = Layout::from_size_align(1 << 20, 4096).unwrap();
            let p = a.alloc(page); // an alignment above a line is the system's to keep
            assert_eq!(p as usize % 4096, 0);
            a.dealloc(p, page);

            let small = Layout::from_size_align(1000, 4).unwrap();
            let p = a.alloc(small);
            for i in 0..1000 {
                *p.add(i) = (i % 251) as u8;
            }
            let p = a.realloc(p, small, 100_000); // grows across the threshold
            assert_eq!(p as usize % LINE, 0);
            assert!((0..1000).all(|i| *p.add(i) == (i % 251) as u8));
            let big = Layout::from_size_align(100_000, 4).unwrap();
            let p = a.realloc(p, big, 300_000); // grows above it
            assert_eq!(p as usize % LINE, 0);
            assert!((0..1000).all(|i| *p.add(i) == (i % 251) as u8));
            let p = a.realloc(p, Layout::from_size_align(300_000, 4).unwrap(), 500); // and back below it
            assert!((0..500).all(|i| *p.add(i) == (i % 251) as u8));
            a.dealloc(p, Layout::from_size_align(500, 4).unwrap());
        }
    }
}
