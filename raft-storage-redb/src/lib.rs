//! The raft-core log and election-state traits on `redb`.
#![warn(missing_docs)]
