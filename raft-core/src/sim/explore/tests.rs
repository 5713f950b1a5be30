//! Bounded explorations: the correct protocol passes, planted bugs are caught.

use super::*;

#[test]
fn smoke() {
    for start in [Start::Cold, Start::Leader] {
        let r = explore(&Options::new(3, start));
        eprintln!("{start:?}: {r:?}");
    }
}
