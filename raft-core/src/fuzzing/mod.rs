//! Properties of every decoder a peer or a disk can feed bytes to, written once and checked by
//! two drivers: the coverage-guided targets in the repository's `fuzz/` directory (nightly,
//! libFuzzer) and the corpus replay in `tests/fuzz_corpus.rs` (stable, part of `cargo test`).
//!
//! Each `check_*` function takes arbitrary bytes and panics only when a property fails: a
//! decoder panicking, a decoded value that does not encode back to the same bytes, a value
//! outside the limits it was decoded under, or a decode that allocated far more than its
//! input. A panic here is a bug in the decoder (or in the property), never an expected outcome.
//!
//! Allocation is measured by [`CountingAlloc`], which a driver installs as its global
//! allocator; the bound is only checked once that allocator is seen to be serving
//! ([`alloc_probe_active`]), and the drivers assert that it is.
//!
//! Not part of the library's interface: hidden from the docs and behind the `testing` feature.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

mod stored;
mod wire;

pub use stored::{
    check_election_state, check_log_meta, check_record, check_stored_batch, check_voters,
};
pub use wire::{check_request_frame, check_response_frame, tight_limits};

/// Heap bytes a decoder may allocate per input byte. The largest ratio of a decoded value to
/// its wire form is a list of byte strings: 4 bytes on the wire become a 32-byte `Bytes`.
pub const ALLOC_PER_INPUT_BYTE: usize = 12;

/// Heap bytes any decode may allocate regardless of its input (shared-buffer headers).
pub const ALLOC_SLACK: usize = 1024;

/// A global allocator that forwards to [`System`] and counts, per thread, what was asked for:
/// how [`measure`] sees what a decoder allocated.
pub struct CountingAlloc;

thread_local! {
    // Const-initialised cells without destructors: touching them never allocates, which an
    // allocator must not do.
    static TOTAL: Cell<usize> = const { Cell::new(0) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

static ACTIVE: AtomicBool = AtomicBool::new(false);

fn note(size: usize) {
    ACTIVE.store(true, Ordering::Relaxed);
    // `try_with`: a thread being torn down has no counters left, and its allocations are not
    // inside any measurement.
    let _ = TOTAL.try_with(|t| t.set(t.get().saturating_add(size)));
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
}

// SAFETY: every call is forwarded unchanged to `System`; the counting touches only
// const-initialised thread-locals and an atomic, neither of which allocates.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this allocator with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Growth is what a decoder could be tricked into; the whole new block is the cost.
        if new_size > layout.size() {
            note(new_size);
        }
        // SAFETY: as for `dealloc`, and `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Whether [`CountingAlloc`] is the global allocator of this process (it has served at least
/// one allocation).
pub fn alloc_probe_active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// What one measured call allocated on its thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Bytes asked for in all, frees not subtracted.
    pub total: usize,
    /// The largest single request.
    pub largest: usize,
}

/// Runs `f` and reports what it allocated on this thread (zeros unless [`CountingAlloc`] is
/// installed).
pub fn measure<R>(f: impl FnOnce() -> R) -> (R, AllocStats) {
    TOTAL.with(|t| t.set(0));
    LARGEST.with(|l| l.set(0));
    let out = f();
    let stats = AllocStats {
        total: TOTAL.with(Cell::get),
        largest: LARGEST.with(Cell::get),
    };
    (out, stats)
}

/// Panics if a decode of `input_len` bytes allocated more than [`ALLOC_PER_INPUT_BYTE`] per
/// byte plus [`ALLOC_SLACK`].
pub fn assert_alloc_bounded(what: &str, input_len: usize, stats: AllocStats) {
    let bound = ALLOC_PER_INPUT_BYTE
        .saturating_mul(input_len)
        .saturating_add(ALLOC_SLACK);
    assert_alloc_at_most(what, input_len, bound, stats);
}

/// Panics if a decode of `input_len` bytes allocated more than `bound` bytes in all.
pub fn assert_alloc_at_most(what: &str, input_len: usize, bound: usize, stats: AllocStats) {
    if !alloc_probe_active() {
        return;
    }
    assert!(
        stats.total <= bound,
        "{what}: decoding {input_len} bytes allocated {} bytes (largest {}), bound {bound}",
        stats.total,
        stats.largest
    );
}

/// A deterministic mutation of `input`, driven by `seed`: the stable drivers' stand-in for
/// libFuzzer's mutators (bit flips, boundary values in bytes and little-endian `u32`s,
/// insertions, deletions, duplicated ranges and truncation), a few of them stacked.
pub fn mutate(input: &[u8], seed: u64) -> Vec<u8> {
    let mut out = input.to_vec();
    let mut state = seed ^ 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        // xorshift64*: enough spread for choosing positions, and no dependency.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let rounds = 1 + next() % 4;
    for _ in 0..rounds {
        let r = next();
        let pos = |len: usize, r: u64| if len == 0 { 0 } else { (r >> 8) as usize % len };
        match r % 7 {
            0 if !out.is_empty() => {
                let p = pos(out.len(), r);
                out[p] ^= 1 << ((r >> 40) % 8);
            }
            1 if !out.is_empty() => {
                let p = pos(out.len(), r);
                out[p] = [0, 1, 0x7f, 0x80, 0xff][(r >> 40) as usize % 5];
            }
            2 if out.len() >= 4 => {
                let p = pos(out.len() - 3, r);
                let v = [0, 1, 2, 0x7fff_ffff, u32::MAX, out.len() as u32][(r >> 40) as usize % 6];
                out[p..p + 4].copy_from_slice(&v.to_le_bytes());
            }
            3 => {
                let p = pos(out.len() + 1, r);
                out.insert(p, (r >> 48) as u8);
            }
            4 if !out.is_empty() => {
                let p = pos(out.len(), r);
                let n = 1 + (r >> 40) as usize % 8;
                out.drain(p..(p + n).min(out.len()));
            }
            5 if !out.is_empty() => {
                let p = pos(out.len(), r);
                let n = 1 + (r >> 40) as usize % 16;
                let piece: Vec<u8> = out[p..(p + n).min(out.len())].to_vec();
                out.splice(p..p, piece);
            }
            _ => {
                let keep = pos(out.len() + 1, r);
                out.truncate(keep);
            }
        }
    }
    out
}
