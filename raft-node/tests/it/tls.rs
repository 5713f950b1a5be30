//! TLS on the client port, end to end, with a rustls client (ring provider) trusting the dev
//! CA that `raft-node certs` made.

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::harness::{self, Cluster, Value};

type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A TLS connection to `127.0.0.1:port` that trusts `certs/ca.pem` and expects the server to
/// be replica 1 (its certificate names `replica-1.raft`); with `client`, it presents that
/// replica's certificate.
fn tls_connect(
    certs: &Path,
    port: u16,
    client: Option<u32>,
) -> std::io::Result<BufReader<TlsStream>> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(certs.join("ca.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some(id) => {
            let chain = CertificateDer::pem_file_iter(certs.join(format!("node-{id}.pem")))
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = PrivateKeyDer::from_pem_file(certs.join(format!("node-{id}.key"))).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
    };
    let name = ServerName::try_from("replica-1.raft").unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let tcp = TcpStream::connect(("127.0.0.1", port))?;
    tcp.set_read_timeout(Some(Duration::from_secs(15)))?;
    Ok(BufReader::new(rustls::StreamOwned::new(conn, tcp)))
}

fn tls_cmd(c: &mut BufReader<TlsStream>, args: &[&str]) -> std::io::Result<Value> {
    c.get_mut().write_all(&harness::encode_request(args))?;
    c.get_mut().flush()?;
    harness::read_value(c)
}

/// Starts one node with `extra` and waits until a TLS client (presenting `client`'s
/// certificate, if any) gets PONG.
fn start_tls(extra: &str, client: Option<u32>) -> Cluster {
    let mut cluster = Cluster::prepare(1, extra);
    cluster.launch_all();
    let (certs, port) = (cluster.dir().join("certs"), cluster.port(1));
    harness::wait_until("the node to answer PING over TLS", || {
        tls_connect(&certs, port, client)
            .and_then(|mut c| tls_cmd(&mut c, &["PING"]))
            .is_ok_and(|v| v == Value::Simple("PONG".into()))
    });
    cluster
}

/// Sends a plaintext PING to `port` and returns what came back before the server closed the
/// connection (panics if it is left open).
fn plaintext_ping(port: u16) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    s.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("the server left a plaintext client hanging: {e}"),
    }
    got
}

/// Goal: with `client.tls_cert`/`tls_key`, the client port speaks TLS: a TLS client runs SET
/// and GET; a plaintext client is refused cleanly (closed, never answered) and the port keeps
/// serving. Method: one node with its replica certificate on the client port; a rustls client
/// trusting the dev CA; a raw TCP client sending a plaintext PING.
#[test]
fn tls_on_the_client_port_serves_tls_clients_and_refuses_plaintext() {
    let extra = "[client]\ntls_cert = \"certs/node-1.pem\"\ntls_key = \"certs/node-1.key\"\n";
    let cluster = start_tls(extra, None);
    let (certs, port) = (cluster.dir().join("certs"), cluster.port(1));
    let mut c = tls_connect(&certs, port, None).unwrap();
    assert_eq!(
        tls_cmd(&mut c, &["SET", "k", "secret"]).unwrap(),
        Value::ok()
    );
    assert_eq!(
        tls_cmd(&mut c, &["GET", "k"]).unwrap(),
        Value::bulk("secret")
    );

    let answer = plaintext_ping(port);
    assert!(
        !String::from_utf8_lossy(&answer).contains("PONG"),
        "{answer:?}"
    );
    // The refused client left the server and the other connection intact.
    assert_eq!(
        tls_cmd(&mut c, &["GET", "k"]).unwrap(),
        Value::bulk("secret")
    );
    let mut d = tls_connect(&certs, port, None).unwrap();
    assert_eq!(
        tls_cmd(&mut d, &["GET", "k"]).unwrap(),
        Value::bulk("secret")
    );
}

/// Goal: with `client.tls_ca`, only clients with a certificate from that CA are served.
/// Method: one node requiring client certificates from the dev CA; a client presenting
/// replica 2's certificate runs SET and GET; one without a certificate gets no answer.
#[test]
fn a_client_ca_requires_client_certificates() {
    let extra = "[client]\ntls_cert = \"certs/node-1.pem\"\ntls_key = \"certs/node-1.key\"\n\
                 tls_ca = \"certs/ca.pem\"\n";
    let cluster = start_tls(extra, Some(2));
    let (certs, port) = (cluster.dir().join("certs"), cluster.port(1));
    let mut c = tls_connect(&certs, port, Some(2)).unwrap();
    assert_eq!(tls_cmd(&mut c, &["SET", "k", "v"]).unwrap(), Value::ok());
    assert_eq!(tls_cmd(&mut c, &["GET", "k"]).unwrap(), Value::bulk("v"));
    let refused = tls_connect(&certs, port, None).and_then(|mut c| tls_cmd(&mut c, &["GET", "k"]));
    assert!(
        refused.is_err(),
        "served without a client certificate: {refused:?}"
    );
}

/// Goal: `--join` speaks TLS when the client ports do, verifying the node it asks (the replica
/// named in `N@host:port`) and presenting its own certificate to a port that requires one.
/// Method: node 1 formatted alone, its client port on TLS with client certificates required;
/// node 2 joins through `1@127.0.0.1:<port>` and shows up on the leader as a fetching observer.
#[test]
fn a_node_joins_through_a_tls_client_port() {
    let extra = "[client]\ntls_cert = \"certs/node-1.pem\"\ntls_key = \"certs/node-1.key\"\n\
                 tls_ca = \"certs/ca.pem\"\n";
    let mut cluster = Cluster::prepare_with_joiners(1, 1, extra);
    let port = cluster.port(1);
    cluster.join_through_addrs(2, &[format!("1@127.0.0.1:{port}")]);
    cluster.launch_all();
    let certs = cluster.dir().join("certs");
    harness::wait_until("node 2 to fetch from the leader as an observer", || {
        tls_connect(&certs, port, Some(2))
            .and_then(|mut c| tls_cmd(&mut c, &["RAFT", "VOTERS"]))
            .is_ok_and(|v| v.text().lines().any(|l| l.starts_with("observer:2 ")))
    });
    let log = cluster.log_text(2);
    assert!(
        log.contains("joined with the voters a running node named"),
        "{log}"
    );
}
