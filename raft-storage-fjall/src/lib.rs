//! The raft-core log and election-state traits on `fjall`.
#![warn(missing_docs)]
