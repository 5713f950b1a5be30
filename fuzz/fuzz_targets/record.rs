//! One stored or fetched record (raft-core `codec::decode_record`).
//! The properties are in `raft_core::fuzzing::check_record`.
#![no_main]

use raft_core::fuzzing::CountingAlloc;

// The allocation bound of the check is measured through this allocator.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| raft_core::fuzzing::check_record(data));
