//! What a session takes and gives, wherever it runs: its start options, a cell's outputs and
//! error, completions, and the sink its output lines go to. A leaf: the session, the front
//! ends' protocol and the completion index all name these.

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// How a session starts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SessionOptions {
    /// Default device of the session (`cpu`, `tpu:0`, …).
    pub device: Option<String>,
    /// PJRT plugin to use for that device's kind.
    pub plugin: Option<PathBuf>,
    /// The eager crate to preload (defaults to the one this binary was built from, or
    /// `EAGER_SOURCE_DIR`).
    pub eager_dir: Option<PathBuf>,
}

/// One display of a cell: its payload per MIME type (`image/png` as base64), and whether it
/// is the cell's value (a Jupyter `execute_result`) or a display (`display_data`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Output {
    pub data: Vec<(String, String)>,
    pub is_result: bool,
}

impl Output {
    pub(crate) fn text(s: impl Into<String>) -> Output {
        Output { data: vec![("text/plain".into(), s.into())], is_result: false }
    }
    pub fn get(&self, mime: &str) -> Option<&str> {
        self.data.iter().find(|(m, _)| m == mime).map(|(_, v)| v.as_str())
    }
}

/// A cell that failed: Jupyter's `ename`, `evalue`, and the rendered report (ANSI colours).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CellError {
    pub ename: String,
    pub evalue: String,
    pub traceback: Vec<String>,
    /// The message reached the cell's stderr already (a `?` error, a panic): a terminal
    /// front end need not print it again.
    pub on_stderr: bool,
}

impl CellError {
    pub fn new(ename: &str, evalue: impl Into<String>) -> CellError {
        let evalue = evalue.into();
        CellError {
            ename: ename.into(),
            traceback: vec![format!("{ename}: {evalue}")],
            evalue,
            on_stderr: false,
        }
    }
}

/// A completion: the text to insert (a name, as Jupyter's messaging spec says), its kind
/// (`function`, `module`, …) and a signature or label for clients that show one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion {
    pub text: String,
    pub kind: String,
    pub signature: String,
}

impl Completion {
    /// From rust-analyzer's snippet (`from_utf8(vec)`, `println!(…)`): the name, with the
    /// snippet as the signature.
    pub(crate) fn from_snippet(code: String, kind: &str, label: String) -> Completion {
        let text: String = code
            .chars()
            .take_while(|ch| ch.is_alphanumeric() || matches!(ch, '_' | ':' | '!' | '#'))
            .collect();
        let text = if text.is_empty() { code.clone() } else { text };
        let signature = if code.contains('(') { code } else { label };
        Completion { text, kind: kind.to_string(), signature }
    }
}

/// Where a line of the child's stdout or stderr goes.
pub type StreamSink = Arc<dyn Fn(Stream, &str) + Send + Sync>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}
