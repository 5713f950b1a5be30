//! Frames on one QUIC stream and what their failures mean: the length prefix, the
//! application codes a receiver resets a stream with, and the mapping of quinn's stream and
//! connection errors to [`TransportError`]s (whether a call may be retried on a new
//! connection, or is final).

use bytes::Bytes;
use quinn::{ConnectionError, RecvStream, VarInt};

use raft_core::codec::DecodeError;
use raft_core::io::TransportError;
use raft_core::ReplicaId;

/// Stream and connection error codes this transport sends (QUIC application codes).
pub(crate) mod code {
    use quinn::VarInt;
    /// The endpoint is shutting down.
    pub const CLOSING: VarInt = VarInt::from_u32(0);
    /// The request frame exceeded the receiver's limit.
    pub const REQUEST_TOO_LARGE: VarInt = VarInt::from_u32(1);
    /// The request frame could not be decoded.
    pub const MALFORMED: VarInt = VarInt::from_u32(2);
    /// The receiver turned the request away unhandled: it does not serve yet, or does not run
    /// the request's group.
    pub const NOT_SERVING: VarInt = VarInt::from_u32(3);
    /// The response would exceed the responder's limit.
    pub const RESPONSE_TOO_LARGE: VarInt = VarInt::from_u32(4);
}

/// Bytes of the length prefix before every frame on a stream.
pub(crate) const LEN_PREFIX: usize = 4;
/// A failed exchange on one stream, before it is mapped to a [`TransportError`].
pub(crate) enum StreamFailure {
    /// The connection was gone before the stream opened: nothing was sent.
    NotOpened(ConnectionError),
    /// The connection is gone; the call may be retried on a new one.
    Connection(ConnectionError),
    /// Anything else: final.
    Final(TransportError),
}

/// Why a frame could not be read from a stream.
pub(crate) enum ReadFailure {
    /// The length prefix announced more than the limit; nothing was allocated for it.
    TooLarge(usize),
    /// The stream or connection failed.
    Read(quinn::ReadExactError),
}

/// Reads one length-prefixed frame. Allocates only after the length passed the limit.
pub(crate) async fn read_frame(recv: &mut RecvStream, limit: usize) -> Result<Bytes, ReadFailure> {
    let mut len = [0u8; LEN_PREFIX];
    recv.read_exact(&mut len).await.map_err(ReadFailure::Read)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > limit {
        return Err(ReadFailure::TooLarge(len));
    }
    let mut buf = vec![0u8; len];
    recv.read_exact(&mut buf).await.map_err(ReadFailure::Read)?;
    Ok(Bytes::from(buf))
}

/// Maps a code the peer reset or stopped our stream with.
pub(crate) fn peer_refusal(to: ReplicaId, code: VarInt, sent: usize) -> TransportError {
    let codec = |source| TransportError::Codec { peer: to, source };
    if code == code::REQUEST_TOO_LARGE {
        // The peer's limit is not on the wire; 0 stands for "the peer's own limit".
        codec(DecodeError::TooLarge {
            what: "request frame at the peer",
            len: sent as u64,
            limit: 0,
        })
    } else if code == code::RESPONSE_TOO_LARGE {
        codec(DecodeError::TooLarge {
            what: "response frame at the peer",
            len: 0,
            limit: 0,
        })
    } else if code == code::MALFORMED {
        codec(DecodeError::InvalidValue {
            what: "request refused by the peer",
            value: code.into(),
        })
    } else if code == code::NOT_SERVING {
        TransportError::NotSent {
            peer: to,
            reason: "peer turned the request away unhandled (not serving yet, or not running \
                     its group)"
                .into(),
        }
    } else {
        TransportError::Unreachable {
            peer: to,
            reason: format!("stream reset by peer ({code})"),
        }
    }
}

pub(crate) fn write_failure(to: ReplicaId, e: quinn::WriteError, sent: usize) -> StreamFailure {
    match e {
        quinn::WriteError::ConnectionLost(e) => StreamFailure::Connection(e),
        quinn::WriteError::Stopped(code) => StreamFailure::Final(peer_refusal(to, code, sent)),
        other => StreamFailure::Final(TransportError::Unreachable {
            peer: to,
            reason: other.to_string(),
        }),
    }
}

pub(crate) fn read_failure(to: ReplicaId, e: quinn::ReadExactError, sent: usize) -> StreamFailure {
    let reason = match e {
        quinn::ReadExactError::ReadError(quinn::ReadError::ConnectionLost(e)) => {
            return StreamFailure::Connection(e)
        }
        quinn::ReadExactError::ReadError(quinn::ReadError::Reset(code)) => {
            return StreamFailure::Final(peer_refusal(to, code, sent))
        }
        quinn::ReadExactError::FinishedEarly(n) => {
            format!("stream finished after {n} bytes of a frame")
        }
        other => other.to_string(),
    };
    StreamFailure::Final(TransportError::Unreachable { peer: to, reason })
}

/// Whether a handshake failed on a certificate, ours or theirs (a TLS alert).
pub(crate) fn is_tls_refusal(e: &ConnectionError) -> bool {
    // QUIC carries TLS alerts as CRYPTO_ERROR codes 0x100..=0x1ff (RFC 9001, 4.8).
    let crypto = |code: u64| (0x100..=0x1ff).contains(&code);
    match e {
        ConnectionError::TransportError(t) => crypto(u64::from(t.code)),
        ConnectionError::ConnectionClosed(c) => crypto(u64::from(c.error_code)),
        _ => false,
    }
}
