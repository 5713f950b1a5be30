//! The sans-IO protocol state machine of one replica.
