//! The file layer: the TOML format as written, every field optional so that flags can supply
//! it, and the parse that names the offending key.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{bad, ConfigError};

/// The file format; every field optional so that flags can supply it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub(super) cluster_id: Option<String>,
    pub(super) replica_id: Option<u32>,
    pub(super) data_dir: Option<PathBuf>,
    pub(super) storage: Option<String>,
    pub(super) log: Option<String>,
    pub(super) maxmemory: Option<u64>,
    #[serde(default)]
    pub(super) listen: ListenSection,
    #[serde(default)]
    pub(super) tls: TlsSection,
    #[serde(default)]
    pub(super) voters: Vec<PeerEntry>,
    #[serde(default)]
    pub(super) observers: Vec<PeerEntry>,
    #[serde(default)]
    pub(super) timers: TimersSection,
    #[serde(default)]
    pub(super) snapshot: SnapshotSection,
    #[serde(default)]
    pub(super) lease: LeaseSection,
    #[serde(default)]
    pub(super) expiry: ExpirySection,
    #[serde(default)]
    pub(super) client: ClientSection,
    /// The directory relative paths in the file are resolved against.
    #[serde(skip)]
    pub(super) base: PathBuf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListenSection {
    pub(super) peer: Option<String>,
    pub(super) client: Option<String>,
    pub(super) metrics: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TlsSection {
    pub(super) ca_cert: Option<PathBuf>,
    pub(super) cert: Option<PathBuf>,
    pub(super) key: Option<PathBuf>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PeerEntry {
    pub(super) id: u32,
    pub(super) peer: String,
    pub(super) client: Option<String>,
    /// The voter's directory id (UUID), for `raft-node format`'s founding voter set.
    #[serde(default)]
    pub(super) directory: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TimersSection {
    pub(super) election_timeout_ms: Option<u64>,
    pub(super) fetch_timeout_ms: Option<u64>,
    pub(super) fetch_max_wait_ms: Option<u64>,
    pub(super) request_timeout_ms: Option<u64>,
    pub(super) write_timeout_ms: Option<u64>,
    pub(super) shutdown_timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SnapshotSection {
    pub(super) after_records: Option<u64>,
    pub(super) after_bytes: Option<u64>,
    pub(super) after_secs: Option<u64>,
    pub(super) log_retention: Option<u64>,
    pub(super) chunk_bytes: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LeaseSection {
    pub(super) enabled: Option<bool>,
    pub(super) drift_margin_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ClientSection {
    pub(super) requirepass: Option<String>,
    pub(super) read_mode: Option<String>,
    pub(super) bulk_bytes_max: Option<usize>,
    pub(super) array_len_max: Option<usize>,
    pub(super) inline_bytes_max: Option<usize>,
    pub(super) request_bytes_max: Option<usize>,
    pub(super) connections_max: Option<usize>,
    pub(super) unauthenticated_request_bytes_max: Option<usize>,
    pub(super) output_buffer_bytes_max: Option<usize>,
    pub(super) tls_cert: Option<PathBuf>,
    pub(super) tls_key: Option<PathBuf>,
    pub(super) tls_ca: Option<PathBuf>,
}

impl FileConfig {
    /// Reads and parses a TOML file.
    pub fn load(path: &Path) -> Result<FileConfig, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| bad("--config", format!("cannot read {}: {e}", path.display())))?;
        let mut file = FileConfig::parse(&text)
            .map_err(|e| bad(e.field, format!("{} (in {})", e.problem, path.display())))?;
        file.base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Ok(file)
    }

    /// Parses TOML text; relative paths stay relative to the working directory.
    pub fn parse(text: &str) -> Result<FileConfig, ConfigError> {
        toml::from_str(text).map_err(|e| {
            // toml names unknown and missing keys in backticks; for a bad value the key is the
            // one on the line the error points at.
            let msg = e.message();
            let names_key = ["unknown field", "missing field", "duplicate"]
                .iter()
                .any(|p| msg.starts_with(p));
            let start = e.span().map(|span| span.start);
            let named = msg.split('`').nth(1).filter(|_| names_key).map(|key| {
                match start.and_then(|at| table_at(text, at)) {
                    Some(table) => format!("{table}.{key}"),
                    None => key.to_string(),
                }
            });
            let at = start.and_then(|at| key_at(text, at));
            let field = named.or(at).unwrap_or_else(|| "(file)".into());
            let problem = e.message().trim().replace('\n', " ");
            match start.map(|at| line_of(text, at)) {
                Some(line) => bad(field, format!("{problem}, line {line}")),
                None => bad(field, problem),
            }
        })
    }

    pub(super) fn path(&self, p: &Path) -> PathBuf {
        self.base.join(p)
    }
}

/// The dotted key written on the line holding byte `offset`, with its table header.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let before = text.get(..offset)?;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next()?;
    let key = line.split_once('=')?.0.trim().to_string();
    Some(match table_at(text, line_start) {
        Some(t) => format!("{t}.{key}"),
        None => key,
    })
}

/// The table whose header comes last before the line holding byte `offset` (`None` at the top
/// level).
fn table_at(text: &str, offset: usize) -> Option<String> {
    let before = text.get(..offset)?;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    before[..line_start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim().to_string())
}

/// The 1-based line number of byte `offset`.
fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ExpirySection {
    pub(super) clock_jump_max_ms: Option<u64>,
}
