//! Mutual TLS: rustls configurations (ring provider, TLS 1.3 only) for both sides of a
//! connection, and the mapping from a verified certificate to the replica it names.
//!
//! Outbound, the server name checked is the dialled replica's [`replica_dns_name`], so a peer
//! presenting any other replica's certificate is refused by the handshake. Inbound, the client
//! certificate must chain to the cluster CA and name exactly one replica: any replica when
//! unlisted replicas are accepted (the default: the CA is the membership authority, and a
//! replica nobody configured joins as an observer), else one in the peer table; anything else
//! fails the handshake with a bad-certificate alert and is logged.

use std::fmt;
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore};

use raft_core::ReplicaId;

use crate::certs::replica_dns_name;
use crate::config::TlsMaterial;
use crate::metrics::{ErrorKind, Metrics};
use crate::peers::Peers;
use crate::refusals::Refusals;
use crate::SetupError;

/// The ALPN protocol both sides require.
pub(crate) const ALPN: &[u8] = b"kraft-rs-raft";

pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The parsed TLS material.
pub(crate) struct Identity {
    pub(crate) roots: Arc<RootCertStore>,
    pub(crate) chain: Vec<CertificateDer<'static>>,
    pub(crate) key: PrivateKeyDer<'static>,
}

impl Identity {
    pub(crate) fn parse(tls: &TlsMaterial) -> Result<Identity, SetupError> {
        let bad = |what: &str, e: &dyn fmt::Display| SetupError::Tls(format!("{what}: {e}"));
        let mut roots = RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(tls.ca_cert_pem.as_bytes()) {
            let ca = ca.map_err(|e| bad("ca certificate", &e))?;
            roots.add(ca).map_err(|e| bad("ca certificate", &e))?;
        }
        if roots.is_empty() {
            return Err(SetupError::Tls("no CA certificate in ca_cert_pem".into()));
        }
        let chain = CertificateDer::pem_slice_iter(tls.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad("node certificate", &e))?;
        if chain.is_empty() {
            return Err(SetupError::Tls("no certificate in cert_pem".into()));
        }
        let key = PrivateKeyDer::from_pem_slice(tls.key_pem.as_bytes())
            .map_err(|e| bad("node key", &e))?;
        Ok(Identity {
            roots: Arc::new(roots),
            chain,
            key,
        })
    }
}

/// Which replicas an endpoint accepts: the ones in its peer table, or, with `unlisted`, any
/// replica a cluster CA certificate names.
pub(crate) struct Accept {
    pub(crate) peers: Arc<Peers>,
    pub(crate) unlisted: bool,
}

/// The one accepted replica that `cert` names, if exactly one.
pub(crate) fn replica_of(cert: &CertificateDer<'_>, accept: &Accept) -> Result<ReplicaId, String> {
    let cert =
        webpki::EndEntityCert::try_from(cert).map_err(|e| format!("bad certificate: {e}"))?;
    // With unlisted replicas accepted, the candidates are the replica names the certificate
    // presents; each is then checked the way webpki checks a subject name, as for listed ones.
    let candidates: Vec<ReplicaId> = if accept.unlisted {
        cert.valid_dns_names()
            .filter_map(parse_replica_dns_name)
            .collect()
    } else {
        accept.peers.ids()
    };
    let mut found = None;
    for id in candidates {
        let Ok(name) = ServerName::try_from(replica_dns_name(id)) else {
            continue;
        };
        if cert.verify_is_valid_for_subject_name(&name).is_ok() {
            match found {
                Some(other) if other != id => {
                    return Err(format!(
                        "certificate names several replicas ({other}, {id})"
                    ))
                }
                _ => found = Some(id),
            }
        }
    }
    found.ok_or_else(|| {
        if accept.unlisted {
            "certificate names no replica".to_owned()
        } else {
            "certificate names no configured replica".to_owned()
        }
    })
}

/// The replica id in a `replica-<id>.raft` name (see [`replica_dns_name`]).
fn parse_replica_dns_name(name: &str) -> Option<ReplicaId> {
    let digits = name.strip_prefix("replica-")?.strip_suffix(".raft")?;
    // Canonical decimal only, so that one id has one name.
    if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
        return None;
    }
    digits.parse::<u32>().ok().filter(|n| *n > 0).map(ReplicaId)
}

/// Checks client certificates against the cluster CA, then against the configured peers.
pub(crate) struct ReplicaClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    accept: Accept,
    me: ReplicaId,
    metrics: Arc<Metrics>,
    refusals: Arc<Refusals>,
}

impl fmt::Debug for ReplicaClientVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicaClientVerifier")
            .field("peers", &self.accept.peers.ids())
            .field("unlisted", &self.accept.unlisted)
            .finish()
    }
}

impl ClientCertVerifier for ReplicaClientVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        // The accept loop warns, with the remote address this verifier does not know.
        let refuse = |reason: &dyn fmt::Display| {
            tracing::debug!(replica = %self.me, %reason, "refused inbound peer certificate");
            self.metrics.error(ErrorKind::TlsRefused);
            self.refusals.note_reason(reason.to_string());
        };
        if let Err(e) = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)
        {
            refuse(&e);
            return Err(e);
        }
        match replica_of(end_entity, &self.accept) {
            Ok(_) => Ok(ClientCertVerified::assertion()),
            Err(reason) => {
                refuse(&reason);
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::ApplicationVerificationFailure,
                ))
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The rustls server configuration: our certificate, client certificates required.
pub(crate) fn server_config(
    identity: &Identity,
    me: ReplicaId,
    accept: Accept,
    metrics: Arc<Metrics>,
    refusals: Arc<Refusals>,
) -> Result<rustls::ServerConfig, SetupError> {
    let tls = |e: &dyn fmt::Display| SetupError::Tls(e.to_string());
    let inner = WebPkiClientVerifier::builder_with_provider(identity.roots.clone(), provider())
        .build()
        .map_err(|e| tls(&e))?;
    let verifier = Arc::new(ReplicaClientVerifier {
        inner,
        accept,
        me,
        metrics,
        refusals,
    });
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| tls(&e))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(identity.chain.clone(), identity.key.clone_key())
        .map_err(|e| tls(&e))?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(config)
}

/// The rustls client configuration: the cluster CA as the only root, our certificate offered.
pub(crate) fn client_config(identity: &Identity) -> Result<rustls::ClientConfig, SetupError> {
    let tls = |e: &dyn fmt::Display| SetupError::Tls(e.to_string());
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| tls(&e))?
        .with_root_certificates(identity.roots.clone())
        .with_client_auth_cert(identity.chain.clone(), identity.key.clone_key())
        .map_err(|e| tls(&e))?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(config)
}
