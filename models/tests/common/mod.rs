//! What the model tests share: where the committed fixtures (tiny checkpoints transformers made,
//! with their reference outputs) are, and a copy of one that a test may change.

use std::path::{Path, PathBuf};

/// The fixture directory `name` (`models/tests/fixtures/<name>`).
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// A copy of fixture `name` whose files a test may change or break.
// Not every test file copies a fixture (each compiles this module on its own).
#[allow(dead_code)]
pub fn copy_fixture(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(fixture(name)).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.path().join(e.file_name())).unwrap();
    }
    dir
}
