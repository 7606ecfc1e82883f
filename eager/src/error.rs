//! The library's error type, and what its out-of-memory variant names ([`LiveTensor`],
//! [`format_bytes`]): the error sits under `memory`, which makes those rows and re-exports them.

use std::path::PathBuf;

use crate::device::Device;
use crate::dtype::DType;
use crate::pjrt::{LoadError, PjrtError};
use crate::shape::Spec;

/// Everything that can go wrong in eager. Shape and dtype errors are found before anything
/// reaches XLA; PJRT errors carry the op they came from. Its `Display` is written out below
/// (not derived) so that a REPL session learns the kind of the error a cell's `?` printed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Input shapes that the op cannot take (found before compiling).
    Shape {
        /// The op that refused its inputs.
        op: &'static str,
        /// What was wrong with the shapes, naming the values.
        msg: String,
    },
    /// Input dtypes that the op cannot take (found before compiling).
    DType {
        /// The op that refused its inputs.
        op: &'static str,
        /// What was wrong with the dtypes, naming the values.
        msg: String,
    },
    /// Any other invalid argument (bad dim, bad index, mixed devices, …).
    Invalid {
        /// The op that refused its arguments.
        op: &'static str,
        /// What was wrong, naming the values.
        msg: String,
    },
    /// PJRT rejected a compile, execute or transfer.
    Pjrt {
        /// The op whose compile, execute or transfer failed.
        op: String,
        /// The error PJRT returned.
        source: PjrtError,
    },
    /// An op failed on the device after it was dispatched. Dispatch is asynchronous, so this
    /// is reported by the first read (or wait) of a result that depends on it.
    DeviceFailure {
        /// The op that failed on the device.
        op: String,
        /// The device's error message.
        message: String,
        /// The read (or wait) that reported the failure.
        read: String,
    },
    /// No usable plugin for the device kind.
    Plugin(crate::plugin::PluginError),
    /// A PJRT plugin could not be loaded.
    Load(LoadError),
    /// A file could not be read or written.
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A weights file is malformed, holds what eager cannot, or cannot hold what was saved.
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        msg: String,
    },
    /// A device had no room for an op's results or a transfer (the cap of
    /// `eager::memory::set_limit`, or the plugin's RESOURCE_EXHAUSTED): names the request and
    /// the largest tensors live on that device with the ops that made them.
    OutOfMemory {
        /// The op (or transfer) that asked for memory.
        op: String,
        /// The device that had no room.
        device: Device,
        /// Bytes requested.
        requested: u64,
        /// Bytes live on the device at the time.
        live: u64,
        /// The largest tensors live on the device, with the ops that made them.
        largest: Vec<LiveTensor>,
        /// Why it failed: the cap or the plugin's message.
        cause: String,
    },
    /// The session was interrupted (Ctrl-C in the REPL, interrupt in a notebook).
    Interrupted {
        /// The op that was interrupted.
        op: &'static str,
    },
}

impl Error {
    /// The error's kind, as a notebook names it (Jupyter's `ename`): `ShapeError`, …
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Shape { .. } => "ShapeError",
            Error::DType { .. } => "DTypeError",
            Error::Invalid { .. } => "ValueError",
            Error::Pjrt { .. } => "PjrtError",
            Error::DeviceFailure { .. } => "DeviceError",
            Error::Plugin(_) => "PluginError",
            Error::Load(_) => "PluginLoadError",
            Error::Io { .. } => "IoError",
            Error::Format { .. } => "FormatError",
            Error::OutOfMemory { .. } => "OutOfMemoryError",
            Error::Interrupted { .. } => "Interrupted",
        }
    }

    fn message(&self) -> String {
        match self {
            Error::Shape { op, msg } => format!("{op}: shape error: {msg}"),
            Error::DType { op, msg } => format!("{op}: dtype error: {msg}"),
            Error::Invalid { op, msg } => format!("{op}: {msg}"),
            Error::Pjrt { op, source } => format!("{op}: {source}"),
            Error::DeviceFailure { op, message, read } => {
                format!("{op} failed on the device: {message} (reported when reading the result of {read})")
            }
            Error::Plugin(e) => e.to_string(),
            Error::Load(e) => e.to_string(),
            Error::Io { path, source } => format!("{}: {source}", path.display()),
            Error::Format { path, msg } => format!("{}: {msg}", path.display()),
            Error::OutOfMemory { op, device, requested, live, largest, cause } => {
                let mut s = format!(
                    "{op}: out of memory on {device}: asked for {} with {} live there ({cause})",
                    format_bytes(*requested),
                    format_bytes(*live)
                );
                if !largest.is_empty() {
                    let list: Vec<String> = largest.iter().map(|t| t.describe()).collect();
                    s.push_str(&format!("; largest live tensors: {}", list.join("; ")));
                }
                // What to do about it is the guide's: drop tensors, a smaller batch, a cap.
                s.push_str(" (see \"Memory\" in the guide: docs/src/memory.md)");
                s
            }
            Error::Interrupted { op } => format!("{op}: interrupted"),
        }
    }
}

// By hand, not `#[from]`: the wrapped error's text is this one's, so it is no `source` (a
// chain printer would show it twice).
impl From<crate::plugin::PluginError> for Error {
    fn from(e: crate::plugin::PluginError) -> Error {
        Error::Plugin(e)
    }
}

impl From<LoadError> for Error {
    fn from(e: LoadError) -> Error {
        Error::Load(e)
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = self.message();
        // evcxr prints a cell's `?` error with Display alone: the session keeps its kind.
        note_shown(self.kind(), &text);
        f.write_str(&text)
    }
}

/// The last eager error a session's cell displayed: (kind, text).
static SHOWN: crate::shared::Shared<std::sync::Mutex<Option<(String, String)>>> =
    crate::shared::Shared::new("eager::error::shown", || std::sync::Mutex::new(None));

/// Notes an eager error as it is displayed, in a session's cell process (elsewhere nothing):
/// evcxr prints a cell's `?` error with `Display` alone, and the session reports its kind.
fn note_shown(kind: &str, text: &str) {
    // Only evcxr's cell process has a session: elsewhere skip the symbol lookup.
    static IN_CELL_PROCESS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*IN_CELL_PROCESS.get_or_init(|| std::env::var_os("EVCXR_IS_RUNTIME").is_some())
        || !crate::shared::in_session()
    {
        return;
    }
    *crate::shared::lock(SHOWN.get()) = Some((kind.to_string(), text.to_string()));
}

/// Takes the last eager error a cell displayed: its kind (`ShapeError`, …) and text (the
/// session's control socket answers `take_error` with it). `None` outside a session.
#[doc(hidden)]
pub fn take_shown() -> Option<(String, String)> {
    crate::shared::in_session().then(|| crate::shared::lock(SHOWN.get()).take()).flatten()
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

/// A result whose error is eager's [`Error`] unless another is named: `Result<T, E>` still
/// means std's, so code that names two parameters (evcxr's generated code inside a cell that
/// has `eager::prelude::*` in scope, `Result<(), EvcxrUserCodeError>`) keeps compiling.
pub type Result<T, E = Error> = std::result::Result<T, E>;

// What an out-of-memory error names lives here, under `memory` (whose ledger makes the rows),
// so that the error type needs no layer above it.

/// One live tensor buffer: its size, where it is, what it is and the op that made it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LiveTensor {
    /// Bytes the buffer holds.
    pub bytes: u64,
    /// The device it lives on.
    pub device: Device,
    /// Its dtype.
    pub dtype: DType,
    /// Its shape.
    pub shape: Vec<usize>,
    /// The op that made it (`matmul`, …; `upload` for a copy from the host, `to` for one from
    /// another device).
    pub op: String,
    /// When it was made, in nanoseconds since the ledger's start (the first tensor).
    pub made_ns: u64,
}

impl LiveTensor {
    /// Its dtype and shape (`f32[784, 256]`).
    pub fn spec(&self) -> Spec {
        Spec::new(&self.shape, self.dtype)
    }

    /// `f32[784, 256] 784.0 KiB on cpu:0, made by matmul`.
    pub fn describe(&self) -> String {
        format!("{} {} on {}, made by {}", self.spec(), format_bytes(self.bytes), self.device, self.op)
    }
}

/// `1.5 GiB`, `784.0 KiB`, `12 B`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_as_people_write_them() {
        assert_eq!(format_bytes(12), "12 B");
        assert_eq!(format_bytes(784 * 1024), "784.0 KiB");
        assert_eq!(format_bytes(3 << 29), "1.5 GiB");
    }
}
