//! The session server's wire: the modes a front end's binary runs in for it, and the JSON lines
//! a front end and the process holding its session exchange. A leaf of the crate, so that the
//! front end's side (`remote`), the server's (`server`) and the interrupter (`engine`) share it.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Mutex;

use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};

use crate::interface::{CellError, Completion, Output};

/// The argument that makes a front end's binary the session server (then its socket).
pub(crate) const SERVER_ARG: &str = "--eager-session-server";
/// The argument that makes it one of the server's sessions (then its socket).
pub(crate) const WORKER_ARG: &str = "--eager-session-worker";
/// A server's answer when its binary was replaced since it started: the front end starts a
/// server of the new one.
pub(crate) const REPLACED: &str = "the session server's binary was replaced";
/// The session options the server and its workers start with (JSON).
pub(crate) const OPTIONS_ENV: &str = "EAGER_SESSION_OPTIONS";

/// A front end's request to the process holding its session.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Request {
    /// The first request: the front end's working directory and environment.
    Hello {
        cwd: PathBuf,
        env: Vec<(String, String)>,
    },
    Eval(String),
    Complete {
        src: String,
        pos: usize,
    },
    Hover {
        src: String,
        pos: usize,
    },
    /// A front end's comm message for the session's widgets.
    Comm(serde_json::Value),
    /// Numbers the next cell; no reply.
    CellNumber(u64),
    /// Answered at once, while a cell runs.
    Interrupt,
    Kill,
}

/// What the session's process sends: a stream line at any time, else one reply per request.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Reply {
    Ready,
    Failed(String),
    Stream { stderr: bool, line: String },
    Eval(Result<Vec<Output>, CellError>),
    Complete(usize, Vec<Completion>),
    Hover(Option<String>),
    Comm(Result<serde_json::Value, String>),
}

/// Writes one JSON line on a shared connection.
pub(crate) fn send_line<T: serde::Serialize>(w: &Mutex<UnixStream>, msg: &T) -> Result<()> {
    let mut line = serde_json::to_vec(msg)?;
    line.push(b'\n');
    let mut w = w.lock().map_err(|_| anyhow!("the session connection's lock is poisoned"))?;
    w.write_all(&line).map_err(|e| anyhow!("the session server's process went away: {e}"))
}
