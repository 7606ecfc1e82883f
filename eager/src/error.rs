//! The library's error type.

use std::path::PathBuf;

use crate::pjrt::{LoadError, PjrtError};

/// Everything that can go wrong in eager. Shape and dtype errors are found before anything
/// reaches XLA; PJRT errors carry the op they came from.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Input shapes that the op cannot take (found before compiling).
    #[error("{op}: shape error: {msg}")]
    Shape { op: &'static str, msg: String },
    /// Input dtypes that the op cannot take (found before compiling).
    #[error("{op}: dtype error: {msg}")]
    DType { op: &'static str, msg: String },
    /// Any other invalid argument (bad dim, bad index, mixed devices, …).
    #[error("{op}: {msg}")]
    Invalid { op: &'static str, msg: String },
    /// PJRT rejected a compile, execute or transfer.
    #[error("{op}: {source}")]
    Pjrt { op: String, source: PjrtError },
    /// An op failed on the device after it was dispatched. Dispatch is asynchronous, so this
    /// is reported by the first read (or wait) of a result that depends on it.
    #[error("{op} failed on the device: {message} (reported when reading the result of {read})")]
    DeviceFailure { op: String, message: String, read: String },
    /// No usable plugin for the device kind.
    #[error(transparent)]
    Plugin(#[from] crate::plugin::PluginError),
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// A weights file is malformed, holds what eager cannot, or cannot hold what was saved.
    #[error("{}: {msg}", path.display())]
    Format { path: PathBuf, msg: String },
    /// The session was interrupted (Ctrl-C in the REPL, interrupt in a notebook).
    #[error("{op}: interrupted")]
    Interrupted { op: &'static str },
}

impl Error {
    pub(crate) fn shape(op: &'static str, msg: impl Into<String>) -> Error {
        Error::Shape { op, msg: msg.into() }
    }
    pub(crate) fn dtype(op: &'static str, msg: impl Into<String>) -> Error {
        Error::DType { op, msg: msg.into() }
    }
    pub(crate) fn invalid(op: &'static str, msg: impl Into<String>) -> Error {
        Error::Invalid { op, msg: msg.into() }
    }
    pub(crate) fn pjrt(op: impl Into<String>) -> impl FnOnce(PjrtError) -> Error {
        let op = op.into();
        move |source| Error::Pjrt { op, source }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
