//! A peer's response frame (raft-core `codec::wire::decode_response`).
//! The properties are in `raft_core::fuzzing::check_response_frame`.
#![no_main]

use raft_core::fuzzing::CountingAlloc;

// The allocation bound of the check is measured through this allocator.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| raft_core::fuzzing::check_response_frame(data));
