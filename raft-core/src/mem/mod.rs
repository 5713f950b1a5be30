//! In-memory adapters for the `io` traits: a log, an election store and a snapshot store ([`storage`]),
//! the stores of many groups ([`groups`]) and a transport ([`transport`]). Tests, the simulator and examples use them; they keep everything in
//! memory and have no crash model of their own.

pub mod groups;
pub mod storage;
pub mod transport;

pub use groups::MemGroupStorage;
pub use storage::{MemElectionStore, MemLog, MemSnapshots};
