//! The RPC wire codec: requests and responses as versioned, length-checked frames.
