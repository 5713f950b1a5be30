//! Peer RPCs over QUIC with mutual TLS, implementing `raft_core::io::Transport`.
#![warn(missing_docs)]
