//! Runnable examples that embed the crates of this workspace as a library user would: see the
//! `examples/` directory of this package.
//!
//! * `groups`: three processes, each a host of 100 groups (by default) over one QUIC transport
//!   with mutual TLS and one fjall engine; every group a replicated counter.
//!   `cargo run --release -p raft-examples --example groups -- local`.
