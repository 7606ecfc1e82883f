//! The cell's half of Jupyter's comms: a comm message a cell sends is one [`COMM_MARKER`] line
//! on its stdout ([`CommLine`] as JSON), which the kernel sends on iopub as `comm_open`,
//! `comm_msg` or `comm_close` at once; while the session answers a front end's comm message
//! (a slider moved) the lines go into that answer instead ([`Outbox`]), as the request's
//! children. A leaf of `widgets`.

use std::io::Write;
use std::sync::Mutex;

use eager::shared::Shared;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Starts a line a cell prints to send a comm message: a [`CommLine`] as JSON follows.
pub const COMM_MARKER: &str = "EAGER_COMM ";

/// Which comm message a [`CommLine`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommKind {
    /// `comm_open`: a new comm (a widget's model) with its target and first data.
    Open,
    /// `comm_msg`: data on an open comm (a state update, an answer).
    Msg,
    /// `comm_close`: the comm ends.
    Close,
}

/// One comm message from the session to the front end, as Jupyter's messaging spec has it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommLine {
    /// Open, message or close.
    pub kind: CommKind,
    /// The comm's id.
    pub comm_id: String,
    /// The target an open names (`jupyter.widget`); `None` for the other kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_name: Option<String>,
    /// The message's data (a JSON object).
    pub data: Value,
    /// The message's metadata (`{"version": "2.1.0"}` on a widget's open).
    #[serde(default)]
    pub metadata: Value,
}

impl CommLine {
    /// A `comm_msg` to comm `comm_id` carrying `data`.
    pub fn msg(comm_id: &str, data: Value) -> CommLine {
        CommLine {
            kind: CommKind::Msg,
            comm_id: comm_id.into(),
            target_name: None,
            data,
            metadata: Value::Null,
        }
    }

    /// The `comm_close` of comm `comm_id`.
    pub fn close(comm_id: &str) -> CommLine {
        CommLine { kind: CommKind::Close, ..CommLine::msg(comm_id, serde_json::json!({})) }
    }

    /// The line a cell prints for it.
    pub fn to_line(&self) -> String {
        format!("{COMM_MARKER}{}", serde_json::to_string(self).expect("JSON values serialize"))
    }

    /// The comm message a line of a cell's output stands for, if it is one.
    pub fn parse(line: &str) -> Option<CommLine> {
        serde_json::from_str(line.strip_prefix(COMM_MARKER)?).ok()
    }
}

/// What the session sends back while it answers one comm message from the front end: the comm
/// lines, and the outputs of callbacks that have no Output widget (Jupyter outputs as nbformat
/// writes them; the kernel sends them as children of the front end's message, as ipykernel does).
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    pub lines: Vec<CommLine>,
    pub outputs: Vec<Value>,
}

/// The open outbox while a front end's message is answered; `None` while a cell runs.
static OUTBOX: Shared<Mutex<Option<Outbox>>> =
    Shared::new("eager_cell::widgets::outbox", || Mutex::new(None));

fn outbox() -> std::sync::MutexGuard<'static, Option<Outbox>> {
    OUTBOX.get().lock().unwrap_or_else(|p| p.into_inner())
}

/// Sends a comm message: into the open outbox, else as a line on stdout.
pub(crate) fn emit(line: CommLine) {
    if let Some(b) = outbox().as_mut() {
        b.lines.push(line);
        return;
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", line.to_line());
    let _ = out.flush();
}

/// Whether a front end's message is being answered (callbacks' outputs go to the outbox).
pub(crate) fn answering() -> bool {
    outbox().is_some()
}

/// Adds outputs of a callback without an Output widget to the open outbox.
pub(crate) fn push_outputs(outputs: Vec<Value>) {
    if let Some(b) = outbox().as_mut() {
        b.outputs.extend(outputs);
    }
}

/// Runs `f` with an outbox open and returns what went into it.
pub(crate) fn answer(f: impl FnOnce()) -> Outbox {
    /// Puts the previous outbox back however `f` ends (a panic included), so that comm lines
    /// go where they went before.
    struct Restore(Option<Option<Outbox>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(previous) = self.0.take() {
                *outbox() = previous;
            }
        }
    }
    let restore = Restore(Some(outbox().replace(Outbox::default())));
    f();
    let done = outbox().take().unwrap_or_default();
    drop(restore);
    done
}

/// A fresh comm id: 32 hex digits, as ipywidgets' uuid4 ids (unique across the sessions a
/// notebook's saved widget state may mix).
pub(crate) fn new_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: Shared<std::sync::atomic::AtomicU64> =
        Shared::new("eager_cell::widgets::counter", || std::sync::atomic::AtomicU64::new(0));
    let n = COUNTER.get().fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(n);
    h.write_u32(std::process::id());
    let a = h.finish();
    h.write_u128(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()),
    );
    format!("{a:016x}{:016x}", h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_other_lines_are_not_comms() {
        let line = CommLine {
            kind: CommKind::Open,
            comm_id: "abc".into(),
            target_name: Some("jupyter.widget".into()),
            data: serde_json::json!({"state": {"value": 3}}),
            metadata: serde_json::json!({"version": "2.1.0"}),
        };
        assert_eq!(CommLine::parse(&line.to_line()), Some(line));
        assert_eq!(CommLine::parse("EAGER_COMMx {}"), None);
        assert_eq!(CommLine::parse("hello"), None);
    }

    #[test]
    fn ids_are_32_hex_digits_and_differ() {
        let (a, b) = (new_id(), new_id());
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn an_answer_collects_lines_instead_of_printing_them() {
        let line = CommLine::close("x");
        let got = answer(|| {
            assert!(answering());
            emit(line.clone());
            push_outputs(vec![serde_json::json!({"output_type": "stream"})]);
        });
        assert_eq!(got.lines, vec![line]);
        assert_eq!(got.outputs.len(), 1);
        assert!(!answering());
    }
}
