//! The parts of `raft-node` that read bytes from outside, as a library: the RESP parser a
//! client's connection feeds and the TOML config loader. The binary uses them from here, and
//! the fuzz targets and property tests reach them without starting a node.

pub mod config;
pub mod resp;

#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
