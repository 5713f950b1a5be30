//! How the endpoint and its socket are tuned: quinn's transport settings from a
//! [`QuicConfig`], and the UDP socket's buffer sizes.

use std::net::UdpSocket;

use quinn::VarInt;

use crate::stream::LEN_PREFIX;
use crate::{QuicConfig, SetupError};

/// Asks for socket buffers of `bytes` each way. The kernel may grant less (its maximum) and a
/// platform may refuse: the transport still works then, only bursts may be dropped sooner.
pub(crate) fn size_buffers(socket: &UdpSocket, bytes: usize) {
    let socket = socket2::SockRef::from(socket);
    for (what, result) in [
        ("receive", socket.set_recv_buffer_size(bytes)),
        ("send", socket.set_send_buffer_size(bytes)),
    ] {
        if let Err(e) = result {
            tracing::warn!(bytes, error = %e, "could not size the UDP socket's {what} buffer");
        }
    }
}

pub(crate) fn transport_config(config: &QuicConfig) -> Result<quinn::TransportConfig, SetupError> {
    let mut t = quinn::TransportConfig::default();
    let idle = quinn::IdleTimeout::try_from(config.idle_timeout)
        .map_err(|_| SetupError::Config("idle_timeout too large".into()))?;
    t.max_idle_timeout(Some(idle));
    t.keep_alive_interval(Some(config.keep_alive));
    t.initial_rtt(config.initial_rtt);
    t.max_concurrent_bidi_streams(VarInt::from_u32(config.streams_max));
    t.max_concurrent_uni_streams(VarInt::from_u32(0));
    let mut mtu = quinn::MtuDiscoveryConfig::default();
    mtu.upper_bound(config.mtu_upper_bound);
    t.mtu_discovery_config(Some(mtu));
    // A whole maximal frame may be in flight on one stream, and several streams at once.
    let frame = u32::try_from(config.frame_bytes_max + LEN_PREFIX).unwrap_or(u32::MAX);
    t.stream_receive_window(VarInt::from_u32(frame));
    t.receive_window(VarInt::from_u32(frame.saturating_mul(2)));
    t.send_window(u64::from(frame) * 2);
    Ok(t)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The kernel's cap on a socket buffer size an unprivileged process may ask for.
    fn sysctl(name: &str) -> usize {
        std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
            .expect("sysctl")
            .trim()
            .parse()
            .expect("a number")
    }

    #[test]
    fn socket_buffers_are_sized_up_to_the_kernel_cap() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let asked = 1 << 20;
        size_buffers(&socket, asked);
        let sock = socket2::SockRef::from(&socket);
        // Linux grants min(asked, cap) and reports twice that (its bookkeeping overhead).
        let recv = sock.recv_buffer_size().unwrap();
        let send = sock.send_buffer_size().unwrap();
        assert!(
            recv >= asked.min(sysctl("rmem_max")),
            "receive buffer {recv}"
        );
        assert!(send >= asked.min(sysctl("wmem_max")), "send buffer {send}");
    }
}
