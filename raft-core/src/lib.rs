//! # raft-core
//!
//! The KRaft protocol (KIP-595: pull replication, epochs, BeginQuorumEpoch/EndQuorumEpoch,
//! observers) with Pre-Vote and check-quorum (KIP-996) and linearizable reads on any replica
//! (the follower-read half of KIP-650), in three layers:
//!
//! * [`protocol`]: the sans-IO state machine of one replica. No clock, no I/O, no ambient
//!   randomness: time and every event are inputs, every effect is an output.
//! * [`io`]: the async traits storage, transport and state machine implement.
//! * [`driver`] (feature `driver`, on by default): the tokio task that runs the protocol over the
//!   `io` traits; what a library user embeds.
//!
//! The wire and disk formats live in [`codec`] as pure functions. [`guide`] is the guide to
//! embedding it: the model, the state machine's rules, bootstrap, outcomes, reads, events.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

/// Whether the planted bug `Planted::$bug` is on in `$cfg`: always false (and nothing to
/// evaluate) without the `testing` feature.
macro_rules! planted {
    ($cfg:expr, $bug:ident) => {{
        #[cfg(feature = "testing")]
        let on = $cfg.test_planted == Some(crate::planted::Planted::$bug);
        #[cfg(not(feature = "testing"))]
        let on = false;
        on
    }};
}

pub mod codec;
pub mod config;
#[cfg(feature = "driver")]
pub mod driver;
#[cfg(feature = "dsim")]
pub mod dsim;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(feature = "driver")]
pub mod guide {
    #![doc = include_str!("guide.md")]
}
pub mod io;
pub mod mem;
pub mod message;
#[cfg(feature = "testing")]
pub mod planted;
pub mod protocol;
#[cfg(feature = "testing")]
pub mod sim;
#[cfg(feature = "driver")]
pub mod snapshot_dir;
pub mod snapshot_stream;
pub mod stored;
#[cfg(feature = "testing")]
pub mod testing;
pub mod types;
pub mod voters;

pub use config::{Config, ConfigError, NotFormatted, ValidatedConfig};
pub use types::{
    DirectoryId, ElectionState, Epoch, GroupId, Instant, Offset, OffsetAndEpoch, Record,
    RecordKind, ReplicaId, Role,
};
pub use voters::{Voter, VoterSet};
