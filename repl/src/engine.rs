//! What a front end asks of a session, wherever the session runs: [`Engine`] is served by a
//! [`Session`](crate::Session) in this process (its impl is beside it) or by a warm one in a process of the session
//! server ([`RemoteSession`](crate::remote::RemoteSession)); [`Interrupter`] stops either's
//! running cell from another thread.

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Result;

use crate::control::Control;
use crate::interface::{CellError, Completion, Output};
use crate::protocol::{send_line, Request};

/// A session's requests, as the front ends make them.
pub trait Engine: Send {
    /// Evaluates a cell (Rust, evcxr's commands or eager's meta commands).
    fn eval(&mut self, cell: &str) -> Result<Vec<Output>, CellError>;
    /// Completions at byte `pos` of `src`: where the replaced text starts, and the candidates.
    fn completions(&mut self, src: &str, pos: usize) -> (usize, Vec<Completion>);
    /// The documentation of what is at byte `pos` of `src`.
    fn hover(&mut self, src: &str, pos: usize) -> Option<String>;
    /// A handle that interrupts the running cell from another thread.
    fn interrupter(&self) -> Interrupter;
    /// Numbers the next cell (a kernel's execution count), as profiles and timelines name it.
    fn set_cell_number(&mut self, n: u64);
    /// Hands a front end's comm message to the session's widgets (`{"kind", "comm_id",
    /// "target_name", "data"}`); their answer: whether the comm was known, the comm lines and
    /// the callbacks' outputs to send back (see `eager_cell::widgets::answer`).
    fn comm(&mut self, message: serde_json::Value) -> Result<serde_json::Value, String>;
}

/// Interrupts a running cell: asks eager to fail its next op; `kill` stops the cell process
/// outright (variables are lost; evcxr restarts it).
#[derive(Clone)]
pub struct Interrupter(Target);

#[derive(Clone)]
enum Target {
    /// A session of this process: its control socket and evcxr's cell process.
    Local { socket: PathBuf, child: Arc<Mutex<std::process::Child>> },
    /// A session served by another process: the connection's writing end.
    Remote(Arc<Mutex<UnixStream>>),
}

impl Interrupter {
    pub(crate) fn local(socket: PathBuf, child: Arc<Mutex<std::process::Child>>) -> Interrupter {
        Interrupter(Target::Local { socket, child })
    }

    pub(crate) fn remote(writer: Arc<Mutex<UnixStream>>) -> Interrupter {
        Interrupter(Target::Remote(writer))
    }

    pub fn interrupt(&self) -> Result<()> {
        match &self.0 {
            Target::Local { socket, .. } => Control::connect(socket)?.interrupt(),
            Target::Remote(w) => send_line(w, &Request::Interrupt),
        }
    }

    pub fn kill(&self) {
        match &self.0 {
            Target::Local { child, .. } => {
                if let Ok(mut c) = child.lock() {
                    let _ = c.kill();
                }
            }
            Target::Remote(w) => {
                let _ = send_line(w, &Request::Kill);
            }
        }
    }
}
