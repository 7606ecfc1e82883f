//! The one error type of viz, and the chart sizes its [`Error::Size`] names.

use std::path::PathBuf;

/// Smallest chart drawn: below it labels cannot be kept apart.
pub(crate) const MIN_SIZE: (u32, u32) = (320, 200);
/// Largest side, in pixels.
pub(crate) const MAX_SIDE: u32 = 16_384;

/// What can go wrong drawing or writing a chart.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// plotters failed to draw: the chart's name and plotters' message.
    #[error("drawing the {chart} chart: {message}")]
    Draw {
        /// The chart's name (`"timeline"`, …).
        chart: &'static str,
        /// plotters' message.
        message: String,
    },
    /// A size outside what charts are drawn at.
    #[error(
        "chart size {width}x{height} is out of range ({}x{} up to {max}x{max})",
        MIN_SIZE.0,
        MIN_SIZE.1,
        max = MAX_SIDE
    )]
    Size {
        /// The width asked for, in pixels.
        width: u32,
        /// The height asked for, in pixels.
        height: u32,
    },
    /// The PNG encoder failed.
    #[error("encoding PNG: {0}")]
    Png(#[from] png::EncodingError),
    /// A chart or trace file could not be written.
    #[error("writing {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// viz's `Result`: its error is [`Error`] unless told otherwise.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Writes `bytes` to `path`, naming the path in the error.
pub(crate) fn write(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|source| Error::Io { path: path.to_path_buf(), source })
}
