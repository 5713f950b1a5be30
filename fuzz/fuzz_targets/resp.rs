//! A client's RESP byte stream (raft-node `resp::Parser`).
//! The properties are in `raft_node::fuzzing::check_resp`.
#![no_main]

use raft_core::fuzzing::CountingAlloc;

// The allocation bound of the check is measured through this allocator.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| raft_node::fuzzing::check_resp(data));
