//! A global allocator that places every block of a page or more on a 64-byte boundary: the
//! system allocator's, with large layouts' alignment raised.
//!
//! Why: glibc's `malloc` aligns to 16 bytes (a large block sits 16 bytes past a page start),
//! so in a tensor of f32 values half of the 32-byte AVX loads and stores that the kernels make
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

/// The layout a block of `l` is allocated with. A function of the requested layout alone, so
/// that `dealloc` is handed exactly the layout `alloc` used, as [`GlobalAlloc`] requires of the
/// allocator it wraps.
pub fn raised(l: Layout) -> Layout {
    match l.size() >= ALIGNED_FROM && l.align() < LINE {
        // LINE is a power of two: `align_to` cannot fail
        true => l.align_to(LINE).unwrap_or(l),
        false => l,
    }
}

// SAFETY: every call forwards to `System` with the layout `raised` gives for the caller's
// layout, the same one for a block's allocation and its release; `raised` keeps the size and
// never lowers the alignment, so each block satisfies the caller's layout.
unsafe impl GlobalAlloc for CacheAligned {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        System.alloc(raised(l))
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        System.alloc_zeroed(raised(l))
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, raised(l))
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        let from = raised(l);
        // SAFETY: the caller guarantees new_size, rounded up to l.align(), does not overflow
        let to = raised(Layout::from_size_align_unchecked(new_size, l.align()));
        if from.align() == to.align() {
            return System.realloc(p, from, new_size);
        }
        // the block crosses ALIGNED_FROM: a new one, the kept bytes copied, the old released
        let q = System.alloc(to);
        if !q.is_null() {
            std::ptr::copy_nonoverlapping(p, q, l.size().min(new_size));
            System.dealloc(p, from);
        }
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Large blocks land on a cache line, small ones keep their own alignment, an alignment
    /// above a line is kept, and a block that grows or shrinks across the threshold keeps its
    /// bytes and ends on the alignment of its new size.
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
            assert_eq!(raised(Layout::from_size_align(100, 4).unwrap()).align(), 4);
            assert_eq!(raised(Layout::from_size_align(1 << 20, 4096).unwrap()).align(), 4096);

            let small = Layout::from_size_align(1000, 4).unwrap();
            let p = a.alloc(small);
            for i in 0..1000 {
                *p.add(i) = (i % 251) as u8;
            }
            let p = a.realloc(p, small, 100_000); // grows across the threshold
            assert_eq!(p as usize % LINE, 0);
            assert!((0..1000).all(|i| *p.add(i) == (i % 251) as u8));
            let big = Layout::from_size_align(100_000, 4).unwrap();
            let p = a.realloc(p, big, 500); // and back below it
            assert!((0..500).all(|i| *p.add(i) == (i % 251) as u8));
            a.dealloc(p, Layout::from_size_align(500, 4).unwrap());
        }
    }
}
