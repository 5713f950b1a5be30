//! What the binary's unit tests share.

/// A checked configuration of replica 1, the only voter,
/// with its data in `data_dir` (the TLS files are named, not read).
pub(crate) fn one_voter(data_dir: &std::path::Path) -> crate::config::NodeConfig {
    let text = format!(
        r#"
        cluster_id = "c1"
        replica_id = 1
        data_dir = "{}"
        [tls]
        ca_cert = "ca.pem"
        cert = "n.pem"
        key = "n.key"
        [[voters]]
        id = 1
        peer = "127.0.0.1:7101"
        client = "127.0.0.1:7001"
        "#,
        data_dir.display()
    );
    crate::config::FileConfig::parse(&text)
        .unwrap()
        .check()
        .unwrap()
}
