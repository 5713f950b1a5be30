//! Runnable examples that embed the crates of this workspace as a library user would: see the
//! `examples/` directory of this package.
//!
//! * `groups`: three processes, each a host of 100 groups (by default) over one QUIC transport
//!   with mutual TLS and one fjall engine; every group a replicated counter.
//!   `cargo run --release -p raft-examples --example groups -- local`.
//! * `kv`: a replicated key-value store of your own in four processes over QUIC and fjall (or
//!   redb): founders formatted once, writes through a follower, snapshots, a leadership
//!   transfer, and a voter replaced by a new machine that catches up through a snapshot. The
//!   program to copy when you start.
//!   `cargo run --release -p raft-examples --example kv -- local [--storage redb]`.
//! * `list`: `kv` with another state machine, an append-only list (`append`, `range`, `len`),
//!   whose snapshot streams in chunks rather than fitting one buffer: the one to copy when your
//!   state is large. The same four-process story.
//!   `cargo run --release -p raft-examples --example list -- local [--storage redb]`.
