//! Small files that must survive a crash whole: the data directory's identity and the voters a
//! join learned.

use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` so that a crash leaves the old file or the new one: a temporary
/// file is written and synced, renamed into place, and the directory synced.
pub fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(parent) = path.parent() {
        std::fs::File::open(parent)?.sync_all()?;
    }
    Ok(())
}
