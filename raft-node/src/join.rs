//! `raft-node run --join ADDR,...`: a new machine learns the voters from any running node
//! instead of from its configuration file.
//!
//! The joining node connects to each given client (RESP) address in turn, sends `RAFT VOTERS`
//! (after `AUTH` with its own `client.requirepass`, when set), and takes the voter lines of
//! the first answer as its contacts: the replica ids, directory ids and the peer addresses
//! every node reaches them at. Before that it checks the node's cluster id (`INFO server`)
//! against its own. It then starts as an observer, always (even when its own id is among the
//! voters: that is the voter it was before it lost its disk, or another machine's), and
//! fetches from the leader; it votes only once the log names it, with its directory, as a
//! voter (`RAFT ADD-VOTER`).
//!
//! When the cluster's client ports speak TLS, so does the join: it verifies the node's
//! certificate against the cluster CA and presents its own node certificate ([`JoinTls`]).
//! An address written `N@host:port` expects replica N's certificate (`replica-N.raft`) there;
//! a plain `host:port` expects a certificate naming the host.
//!
//! The learned set is saved in the data directory (`joined-voters.toml`) once the node runs,
//! so that a later start can use it when no running node answers (a whole cluster restarting
//! at once).

use std::path::Path;
use std::time::Duration;

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// The file in the data directory that keeps the voters learned at the last join.
pub const SAVED_FILE: &str = "joined-voters.toml";

/// The largest `RAFT VOTERS` answer read (a voter line is under 100 bytes).
const ANSWER_BYTES_MAX: usize = 1 << 20;

/// A voter as a running node reported it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LearnedVoter {
    /// Its replica id.
    pub id: u32,
    /// The peer (QUIC) address nodes reach it at.
    pub peer: String,
    /// Its directory id (UUID) as the voter set names it; `None` for a static voter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<String>,
}

/// Why the voters could not be learned.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// A `RAFT VOTERS` answer that is not one.
    #[error("malformed RAFT VOTERS answer: {0}")]
    Malformed(String),
    /// A voter without an address to reach it at.
    #[error("voter r{0} has no known peer address on the node asked (give it one with RAFT UPDATE-VOTER)")]
    NoEndpoint(u32),
    /// The node asked belongs to another cluster.
    #[error("the node at {addr} belongs to cluster {found:?}, not {expected:?}")]
    WrongCluster {
        /// The node asked.
        addr: String,
        /// Its cluster id.
        found: String,
        /// This node's.
        expected: String,
    },
    /// No given address answered, and no voters were saved by an earlier join.
    #[error("no node to join answered: {0}")]
    NoAnswer(String),
    /// The saved list could not be read or written.
    #[error("{path}: {reason}")]
    Saved {
        /// The file.
        path: String,
        /// What failed.
        reason: String,
    },
}

/// The voters in a `RAFT VOTERS` answer: its `voter:<id> directory=<d> endpoint=<addr>` lines
/// (observer lines are skipped). At least one voter, each with an endpoint and a distinct id.
pub fn parse_voters(text: &str) -> Result<Vec<LearnedVoter>, JoinError> {
    let mut voters: Vec<LearnedVoter> = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let Some(rest) = line.strip_prefix("voter:") else {
            if line.starts_with("observer:") {
                continue;
            }
            return Err(JoinError::Malformed(format!("unexpected line {line:?}")));
        };
        let mut fields = rest.split(' ');
        let id: u32 = fields
            .next()
            .and_then(|s| s.parse().ok())
            .filter(|id| *id != 0)
            .ok_or_else(|| JoinError::Malformed(format!("no replica id in {line:?}")))?;
        let fields: Vec<&str> = fields.collect();
        let endpoint = fields
            .iter()
            .find_map(|f| f.strip_prefix("endpoint="))
            .ok_or_else(|| JoinError::Malformed(format!("no endpoint in {line:?}")))?;
        let directory = match fields.iter().find_map(|f| f.strip_prefix("directory=")) {
            None | Some("static") => None,
            Some(d) => {
                d.parse::<raft_core::DirectoryId>().map_err(|e| {
                    JoinError::Malformed(format!("bad directory id in {line:?}: {e}"))
                })?;
                Some(d.to_string())
            }
        };
        if endpoint.is_empty() || endpoint == "-" {
            return Err(JoinError::NoEndpoint(id));
        }
        if voters.iter().any(|v| v.id == id) {
            return Err(JoinError::Malformed(format!("voter r{id} listed twice")));
        }
        voters.push(LearnedVoter {
            id,
            peer: endpoint.to_string(),
            directory,
        });
    }
    if voters.is_empty() {
        return Err(JoinError::Malformed("no voter lines".into()));
    }
    Ok(voters)
}

/// TLS for the join exchange: the cluster CA that signed the nodes' client-port certificates,
/// and this node's certificate for ports that require client certificates.
#[derive(Clone)]
pub struct JoinTls {
    connector: tokio_rustls::TlsConnector,
}

impl JoinTls {
    /// From PEM text: the CA certificate(s), this node's certificate chain and key.
    pub fn from_pem(ca: &str, cert: &str, key: &str) -> Result<JoinTls, String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
            let c = c.map_err(|e| format!("tls.ca_cert: {e}"))?;
            roots.add(c).map_err(|e| format!("tls.ca_cert: {e}"))?;
        }
        let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("tls.cert: {e}"))?;
        let key =
            PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| format!("tls.key: {e}"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| format!("tls.cert and tls.key: {e}"))?;
        Ok(JoinTls {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
        })
    }
}

/// A `--join` address: `N@host:port` names the replica expected there, `host:port` does not.
/// Returns the replica, the address to connect to, and the name its TLS certificate must bear.
pub fn split_target(addr: &str) -> Result<(Option<u32>, &str, String), JoinError> {
    let (replica, hostport) = match addr.split_once('@') {
        Some((n, rest)) => {
            let n: u32 = n
                .parse()
                .ok()
                .filter(|n| *n != 0)
                .ok_or_else(|| JoinError::Malformed(format!("bad replica id in {addr:?}")))?;
            (Some(n), rest)
        }
        None => (None, addr),
    };
    let name = match replica {
        // The name node certificates carry (the QUIC transport's `certs::replica_dns_name`).
        Some(n) => format!("replica-{n}.raft"),
        None => {
            let host = hostport.rsplit_once(':').map_or(hostport, |(h, _)| h);
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .to_string()
        }
    };
    Ok((replica, hostport, name))
}

/// Asks the nodes at `addrs` for their voters, each in turn, in rounds until one answers or
/// `deadline` has passed (nodes may still be starting): the address that answered and its
/// voters. Every attempt is bounded by `attempt`.
pub async fn discover(
    addrs: &[String],
    cluster_id: &str,
    tls: Option<&JoinTls>,
    password: Option<&str>,
    attempt: Duration,
    deadline: Duration,
) -> Result<(String, Vec<LearnedVoter>), JoinError> {
    let until = tokio::time::Instant::now() + deadline;
    let mut failures = Vec::new();
    loop {
        failures.clear();
        for addr in addrs {
            match tokio::time::timeout(attempt, ask(addr, tls, password)).await {
                // A node of another cluster is never joined: the search goes on without it.
                Ok(Ok((found, _))) if found != cluster_id => failures.push(
                    JoinError::WrongCluster {
                        addr: addr.clone(),
                        found,
                        expected: cluster_id.to_string(),
                    }
                    .to_string(),
                ),
                // An answer naming a voter with no address will not change by asking
                // again, and a malformed one is not a node to trust: both end the search.
                Ok(Ok((_, text))) => return parse_voters(&text).map(|v| (addr.clone(), v)),
                Ok(Err(e)) => failures.push(format!("{addr}: {e}")),
                Err(_) => failures.push(format!("{addr}: no answer within {attempt:?}")),
            }
        }
        if tokio::time::Instant::now() >= until {
            return Err(JoinError::NoAnswer(failures.join("; ")));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The node's cluster id (from `INFO server`) and its `RAFT VOTERS` answer, over RESP2 (after
/// `AUTH` when a password is given).
async fn ask(
    addr: &str,
    tls: Option<&JoinTls>,
    password: Option<&str>,
) -> Result<(String, String), String> {
    let (_, hostport, name) = split_target(addr).map_err(|e| e.to_string())?;
    let tcp = TcpStream::connect(hostport)
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    match tls {
        None => exchange(tcp, password).await,
        Some(tls) => {
            let server = rustls::pki_types::ServerName::try_from(name.clone())
                .map_err(|e| format!("{name:?} is not a TLS server name: {e}"))?;
            let stream = tls
                .connector
                .connect(server, tcp)
                .await
                .map_err(|e| format!("TLS with {name}: {e}"))?;
            exchange(stream, password).await
        }
    }
}

/// The exchange of [`ask`] on a connected stream.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    password: Option<&str>,
) -> Result<(String, String), String> {
    let mut reader = ReplyReader::default();
    if let Some(password) = password {
        stream
            .write_all(&command(&["AUTH", password]))
            .await
            .map_err(|e| e.to_string())?;
        match reader.next(&mut stream).await? {
            Reply::Simple(_) => {}
            other => return Err(format!("AUTH answered {other:?}")),
        }
    }
    stream
        .write_all(&command(&["INFO", "server"]))
        .await
        .map_err(|e| e.to_string())?;
    let cluster = match reader.next(&mut stream).await? {
        Reply::Bulk(text) => cluster_id_of(&text)
            .ok_or("INFO server names no cluster_id")?
            .to_string(),
        other => return Err(format!("INFO server answered {other:?}")),
    };
    stream
        .write_all(&command(&["RAFT", "VOTERS"]))
        .await
        .map_err(|e| e.to_string())?;
    match reader.next(&mut stream).await? {
        Reply::Bulk(text) => Ok((cluster, text)),
        other => Err(format!("RAFT VOTERS answered {other:?}")),
    }
}

/// The `cluster_id:` field of an `INFO` answer.
fn cluster_id_of(info: &str) -> Option<&str> {
    info.lines()
        .find_map(|l| l.trim_end().strip_prefix("cluster_id:"))
}

/// A command as a RESP array of bulk strings.
fn command(args: &[&str]) -> bytes::Bytes {
    use crate::resp::Reply as Encoded;
    let args = args.iter().map(|a| Encoded::bulk(a.to_string())).collect();
    Encoded::Array(args).to_bytes()
}

/// The replies `ask` expects.
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    Simple(String),
    Error(String),
    Bulk(String),
}

/// Reads RESP2 replies of the three kinds above from a stream, bounded in size.
#[derive(Default)]
struct ReplyReader {
    buf: Vec<u8>,
}

impl ReplyReader {
    async fn next<S: AsyncRead + Unpin>(&mut self, stream: &mut S) -> Result<Reply, String> {
        loop {
            if let Some((reply, used)) = parse_reply(&self.buf)? {
                self.buf.drain(..used);
                return Ok(reply);
            }
            if self.buf.len() > ANSWER_BYTES_MAX {
                return Err(format!("answer over {ANSWER_BYTES_MAX} bytes"));
            }
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("connection closed before the answer".into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// One reply from the front of `buf` and the bytes it used, or `None` while incomplete.
fn parse_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>, String> {
    let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    if eol == 0 {
        return Err("an empty reply line".into());
    }
    let line = String::from_utf8_lossy(&buf[1..eol]).into_owned();
    match buf[0] {
        b'+' => Ok(Some((Reply::Simple(line), eol + 2))),
        b'-' => Ok(Some((Reply::Error(line), eol + 2))),
        b'$' => {
            let len: usize = line
                .parse()
                .map_err(|_| format!("bad bulk length {line:?}"))?;
            if len > ANSWER_BYTES_MAX {
                return Err(format!("bulk of {len} bytes"));
            }
            let start = eol + 2;
            if buf.len() < start + len + 2 {
                return Ok(None);
            }
            let body = String::from_utf8_lossy(&buf[start..start + len]).into_owned();
            Ok(Some((Reply::Bulk(body), start + len + 2)))
        }
        other => Err(format!("unexpected reply type {:?}", other as char)),
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Saved {
    voters: Vec<LearnedVoter>,
}

/// Keeps `voters` in `data_dir` for a later start that finds no node to ask (written to a
/// synced temporary file and renamed, so a crash leaves the old list or the new one).
pub fn save(data_dir: &Path, voters: &[LearnedVoter]) -> Result<(), JoinError> {
    let path = data_dir.join(SAVED_FILE);
    let failed = |e: std::io::Error| JoinError::Saved {
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    let text = toml::to_string(&Saved {
        voters: voters.to_vec(),
    })
    .map_err(|e| JoinError::Saved {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    crate::durable_file::write_durably(&path, text.as_bytes()).map_err(failed)
}

/// The voters an earlier join saved in `data_dir`, if any.
pub fn load(data_dir: &Path) -> Result<Option<Vec<LearnedVoter>>, JoinError> {
    let path = data_dir.join(SAVED_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(JoinError::Saved {
                path: path.display().to_string(),
                reason: e.to_string(),
            })
        }
    };
    let saved: Saved = toml::from_str(&text).map_err(|e| JoinError::Saved {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    if saved.voters.is_empty() {
        return Err(JoinError::Saved {
            path: path.display().to_string(),
            reason: "no voters".into(),
        });
    }
    Ok(Some(saved.voters))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn voter_lines_are_learned_and_observer_lines_skipped() {
        let text = "voter:1 directory=static endpoint=127.0.0.1:7101\r\n\
                    voter:4 directory=0b7e6d1c-0000-4000-8000-000000000001 endpoint=10.0.0.4:7101\r\n\
                    observer:5 directory=- end_offset=12\r\n";
        assert_eq!(
            parse_voters(text).unwrap(),
            vec![
                LearnedVoter {
                    id: 1,
                    peer: "127.0.0.1:7101".into(),
                    directory: None,
                },
                LearnedVoter {
                    id: 4,
                    peer: "10.0.0.4:7101".into(),
                    directory: Some("0b7e6d1c-0000-4000-8000-000000000001".into()),
                },
            ]
        );
    }

    #[test]
    fn answers_that_cannot_be_joined_are_refused() {
        assert!(matches!(
            parse_voters("voter:2 directory=static endpoint=-\r\n"),
            Err(JoinError::NoEndpoint(2))
        ));
        for bad in [
            "",
            "observer:3 directory=- end_offset=1",
            "voter:x directory=static endpoint=a:1",
            "voter:0 directory=static endpoint=a:1",
            "voter:1 directory=static",
            "voter:1 directory=not-a-uuid endpoint=a:1",
            "voter:1 endpoint=a:1\nvoter:1 endpoint=b:1",
            "hello",
        ] {
            assert!(
                matches!(parse_voters(bad), Err(JoinError::Malformed(_))),
                "{bad:?}"
            );
        }
    }

    #[cfg(feature = "transport-quic")]
    fn name_of(n: u32) -> String {
        split_target(&format!("{n}@h:1")).unwrap().2
    }

    #[test]
    fn join_addresses_name_the_certificate_expected_there() {
        let (n, addr, name) = split_target("2@10.0.0.2:7002").unwrap();
        assert_eq!(
            (n, addr, name.as_str()),
            (Some(2), "10.0.0.2:7002", "replica-2.raft")
        );
        let (n, addr, name) = split_target("kv-1.example:7001").unwrap();
        assert_eq!(
            (n, addr, name.as_str()),
            (None, "kv-1.example:7001", "kv-1.example")
        );
        #[cfg(feature = "transport-quic")]
        assert_eq!(
            name_of(3),
            raft_transport_quic::certs::replica_dns_name(raft_core::ReplicaId(3))
        );
        assert!(split_target("0@h:1").is_err());
        assert!(split_target("x@h:1").is_err());
    }

    #[test]
    fn the_cluster_id_is_read_from_info() {
        let info = "# Server\r\nredis_version:7.2.0\r\ncluster_id:prod-kv\r\ntcp_port:7001\r\n";
        assert_eq!(cluster_id_of(info), Some("prod-kv"));
        assert_eq!(cluster_id_of("# Server\r\n"), None);
    }

    #[test]
    fn replies_are_read_whole_or_not_at_all() {
        assert_eq!(
            parse_reply(b"$5\r\nhello\r\n+OK").unwrap(),
            Some((Reply::Bulk("hello".into()), 11))
        );
        assert_eq!(parse_reply(b"$5\r\nhel").unwrap(), None);
        assert_eq!(parse_reply(b"+OK").unwrap(), None);
        assert_eq!(
            parse_reply(b"-NOAUTH x\r\n").unwrap(),
            Some((Reply::Error("NOAUTH x".into()), 11))
        );
        assert!(parse_reply(b":1\r\n").is_err());
        assert!(parse_reply(b"\r\n").is_err());
        assert!(parse_reply(b"$-x\r\n").is_err());
        assert!(parse_reply(b"$99999999999\r\n").is_err());
    }

    #[test]
    fn saved_voters_load_back_and_a_missing_file_is_none() {
        let dir = std::env::temp_dir().join(format!("raft-node-join-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let _ = std::fs::remove_file(dir.join(SAVED_FILE));
        assert!(load(&dir).unwrap().is_none());
        let voters = vec![LearnedVoter {
            id: 3,
            peer: "127.0.0.1:9".into(),
            directory: Some("0b7e6d1c-0000-4000-8000-000000000003".into()),
        }];
        save(&dir, &voters).unwrap();
        assert_eq!(load(&dir).unwrap(), Some(voters));
        std::fs::write(dir.join(SAVED_FILE), "voters = []\n").unwrap();
        assert!(load(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
