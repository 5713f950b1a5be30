//! Conformance suites that every adapter runs from its own tests (feature `testing`): the
//! storage suite ([`storage`]), the suite of engines holding many groups ([`groups`]), the
//! snapshot-store suite ([`snapshots`]) and the transport suite
//! ([`transport`]). Each suite is one
//! `run_all` function over a builder the adapter provides; each check is a named function so a
//! failure says which promise of the `io` traits was broken. The disk backends also share the
//! SIGKILL crash test with real processes ([`crash`]).

pub mod crash;
pub mod groups;
pub mod snapshots;
pub mod storage;
pub mod transport;
