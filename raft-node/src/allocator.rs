//! How the node asks the C allocator (glibc's malloc, on Linux) to keep less freed memory.
//!
//! Measured with `cargo xtask bench memory` (three nodes, 1 M keys of 256 B): left alone,
//! glibc kept a node at 3.15x (fjall) and 2.66x (redb) its live data. Two habits of glibc
//! cost that: it creates up to eight arenas per core, each keeping its own free memory, and it
//! keeps freed memory inside its heaps instead of returning it. The largest frees come at the
//! end of a snapshot: writes made while it was encoded copied the key table's shards
//! (copy-on-write), and the old shards are released when the encoder drops its capture.
//! mimalloc was measured too and kept more (3.62x and 2.83x).

/// Caps the number of malloc arenas at the number of cores. Called once at start, before the
/// runtime's threads exist.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let arenas = libc::c_int::try_from(cores.max(2)).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only changes a tuning parameter of the allocator; it takes no
        // pointers, and a refused value leaves the default in place.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, arenas);
        }
    }
}

/// Returns the free memory the allocator holds to the system. Called after a large release
/// (a snapshot's capture); it walks the free lists once, which takes milliseconds.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases pages the allocator holds free; it takes no pointers.
    unsafe {
        libc::malloc_trim(0);
    }
}
