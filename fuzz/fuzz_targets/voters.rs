//! A voter set record's payload and a stored snapshot's voter set header (raft-core
//! `codec::decode_voters`, `codec::decode_snapshot_header`).
//! The properties are in `raft_core::fuzzing::check_voters`.
#![no_main]

use raft_core::fuzzing::CountingAlloc;

// The allocation bound of the check is measured through this allocator.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| raft_core::fuzzing::check_voters(data));
