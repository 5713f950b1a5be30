//! The parts of `raft-node` that read bytes from outside, as a library: the RESP parser a
//! client's connection feeds, the TOML config loader, and the `RAFT VOTERS` answer a joining node
//! reads (`join`), and the crash-safe writing of small files (`durable_file`). The binary uses
//! them from here, and the fuzz targets and property tests reach them without starting a node.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod config;
pub mod durable_file;
pub mod join;
pub mod resp;

#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
