//! The one error type of viz.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("drawing the {chart} chart: {message}")]
    Draw { chart: &'static str, message: String },
    #[error(
        "chart size {width}x{height} is out of range ({}x{} up to {max}x{max})",
        crate::chart::MIN_SIZE.0,
        crate::chart::MIN_SIZE.1,
        max = crate::chart::MAX_SIDE
    )]
    Size { width: u32, height: u32 },
    #[error("encoding PNG: {0}")]
    Png(#[from] png::EncodingError),
    #[error("writing {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Writes `bytes` to `path`, naming the path in the error.
pub(crate) fn write(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|source| Error::Io { path: path.to_path_buf(), source })
}
