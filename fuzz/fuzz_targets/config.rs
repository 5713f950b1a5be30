//! A TOML config file (raft-node `config::FileConfig::parse` and `check`).
//! The properties are in `raft_node::fuzzing::check_config`.
#![no_main]

use raft_core::fuzzing::CountingAlloc;

// The allocation bound of the check is measured through this allocator.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| raft_node::fuzzing::check_config(data));
