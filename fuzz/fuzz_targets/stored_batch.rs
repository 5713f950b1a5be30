//! A read of one stored batch (raft-core `stored::locate_in_batch` and `decode_part`).
//! The properties are in `raft_core::fuzzing::check_stored_batch`.
#![no_main]

use raft_core::fuzzing::CountingAlloc;

// The allocation bound of the check is measured through this allocator.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| raft_core::fuzzing::check_stored_batch(data));
