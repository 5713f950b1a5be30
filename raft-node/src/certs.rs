//! `raft-node certs`: a development CA and one certificate per replica, written as PEM files
//! (`ca.pem`, `ca.key`, `node-<id>.pem`, `node-<id>.key`). An existing CA in the directory is
//! reused, so certificates for new replicas can be added later; existing node files are kept.

use std::path::{Path, PathBuf};

use raft_core::ReplicaId;
use raft_transport_quic::certs::{self, CaMaterial};

/// The files of one replica's TLS material.
#[derive(Clone, Debug)]
pub struct NodeFiles {
    /// The node certificate.
    pub cert: PathBuf,
    /// The node key.
    pub key: PathBuf,
}

/// The file names `ensure` uses for replica `id` in `dir`.
pub fn files(dir: &Path, id: ReplicaId) -> NodeFiles {
    NodeFiles {
        cert: dir.join(format!("node-{}.pem", id.0)),
        key: dir.join(format!("node-{}.key", id.0)),
    }
}

/// Creates `dir`, a CA if there is none, and the certificate of every replica in `ids` that
/// has none. Returns the paths of the files written.
pub fn ensure(dir: &Path, ids: &[ReplicaId]) -> Result<Vec<PathBuf>, String> {
    let ctx =
        |what: &str, p: &Path, e: &dyn std::fmt::Display| format!("{what} {}: {e}", p.display());
    std::fs::create_dir_all(dir).map_err(|e| ctx("cannot create", dir, &e))?;
    let (ca_cert, ca_key) = (dir.join("ca.pem"), dir.join("ca.key"));
    let mut written = Vec::new();
    let ca = if ca_cert.exists() && ca_key.exists() {
        CaMaterial {
            cert_pem: std::fs::read_to_string(&ca_cert)
                .map_err(|e| ctx("cannot read", &ca_cert, &e))?,
            key_pem: std::fs::read_to_string(&ca_key)
                .map_err(|e| ctx("cannot read", &ca_key, &e))?,
        }
    } else {
        let ca = certs::generate_ca().map_err(|e| e.to_string())?;
        write(&ca_cert, &ca.cert_pem, false)?;
        write(&ca_key, &ca.key_pem, true)?;
        written.extend([ca_cert, ca_key]);
        ca
    };
    for id in ids {
        let f = files(dir, *id);
        if f.cert.exists() && f.key.exists() {
            continue;
        }
        let node = certs::generate_node(&ca, *id).map_err(|e| e.to_string())?;
        write(&f.cert, &node.cert_pem, false)?;
        write(&f.key, &node.key_pem, true)?;
        written.extend([f.cert, f.key]);
    }
    Ok(written)
}

fn write(path: &Path, text: &str, secret: bool) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("cannot restrict {}: {e}", path.display()))?;
    }
    #[cfg(not(unix))]
    let _ = secret;
    Ok(())
}
