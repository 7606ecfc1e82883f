//! A front end's side of the session server (`repl/src/server.rs`): [`connect`] asks the
//! per-user server for a warm session (starting the server if none listens), and
//! [`RemoteSession`] forwards the front end's requests to the process that holds it, one JSON
//! line each way. The session is the front end's alone: its process ends when this
//! connection closes, however the front end ends.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::engine::{Engine, Interrupter};
use crate::interface::{CellError, Completion, Output, SessionOptions, Stream, StreamSink};
use crate::protocol::{send_line, Reply, Request, OPTIONS_ENV, REPLACED, SERVER_ARG};

/// Env var: `0` turns the session server off (each front end starts its own session).
pub const SERVER_ENV: &str = "EAGER_SESSION_SERVER";

/// Whether front ends ask the session server (on unless `EAGER_SESSION_SERVER=0`).
pub fn enabled() -> bool {
    std::env::var_os(SERVER_ENV).is_none_or(|v| v != "0")
}

/// Env vars that shape a warm session's start (the toolchain, the plugin, eager's settings):
/// a warm session serves only front ends whose values are the same, so they name the server.
/// Every other variable (a venv's `PATH` among them) travels with the hand-over instead.
fn shapes_session(key: &str) -> bool {
    let own = key.starts_with("EAGER_SESSION_") || key == "EAGER_REPL_PHASES";
    let prefixed = ["EAGER_", "XLA_", "TF_", "EVCXR_", "CARGO", "RUST"].iter().any(|p| key.starts_with(p));
    (prefixed && !own) || matches!(key, "LD_LIBRARY_PATH" | "HOME" | "XDG_CACHE_HOME")
}

/// Where `PATH` finds `name` (the toolchain a session builds cells with): what of `PATH`
/// shapes a session.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .map(|p| p.canonicalize().unwrap_or(p))
}

/// The server's socket for this binary's path, these options and that environment: other
/// settings get a server of their own. A rebuilt binary keeps the name: its old server exits
/// (see `server.rs`).
pub(crate) fn server_socket(dir: &Path, opts: &SessionOptions) -> Result<PathBuf> {
    let exe = std::env::current_exe().context("finding this program's path")?;
    let mut h = DefaultHasher::new();
    exe.hash(&mut h);
    opts.hash(&mut h);
    let mut env: Vec<(String, String)> = std::env::vars().filter(|(k, _)| shapes_session(k)).collect();
    env.sort();
    env.hash(&mut h);
    (on_path("rustc"), on_path("cargo")).hash(&mut h);
    let name = exe.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(dir.join(format!("server-{name}-{:016x}.sock", h.finish())))
}

/// Stops every session server of this user (this binary's and the other front ends'), with
/// their spares; sessions in use go on. How many were stopped.
pub fn stop_servers() -> Result<usize> {
    let dir = crate::files::runtime_dir()?;
    let mut stopped = 0;
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("server-") && name.ends_with(".sock")) {
            continue;
        }
        // A socket whose server died is only a file.
        let Ok(mut server) = UnixStream::connect(entry.path()) else {
            let _ = std::fs::remove_file(entry.path());
            continue;
        };
        let _ = server.set_read_timeout(Some(Duration::from_secs(10)));
        if writeln!(server, "stop").is_ok() {
            let mut answer = String::new();
            let _ = BufReader::new(&server).read_line(&mut answer);
            stopped += 1;
        }
    }
    Ok(stopped)
}

/// A session held by a process of the session server.
pub struct RemoteSession {
    writer: Arc<Mutex<UnixStream>>,
    replies: mpsc::Receiver<Reply>,
}

/// Starts the session server for these options if none listens, and waits until its warm
/// session is ready (`eager-repl --warm`, `eager-kernel warm`: a login script or a notebook
/// server's start can make the first session of the day warm too).
pub fn warm(opts: &SessionOptions) -> Result<()> {
    ask(opts, "warm").map(drop)
}

/// Sends `request` to the session server (started if none listens); its answer: the socket of
/// the warm session (handed over for `session`, announced for `warm`).
fn ask(opts: &SessionOptions, request: &str) -> Result<PathBuf> {
    let dir = crate::files::runtime_dir()?;
    let socket = server_socket(&dir, opts)?;
    // Twice at most: a server of a replaced binary answers so, and leaves.
    for _ in 0..2 {
        let mut server = match UnixStream::connect(&socket) {
            Ok(s) => s,
            Err(_) => {
                spawn_server(&socket, opts)?;
                wait_for_server(&socket)?
            }
        };
        writeln!(server, "{request}").context("asking the session server")?;
        let mut answer = String::new();
        // The server answers when a warm session is ready (at once on a warm day).
        BufReader::new(&server).read_line(&mut answer).context("reading the session server's answer")?;
        match serde_json::from_str::<Result<PathBuf, String>>(answer.trim()) {
            Ok(Ok(path)) => return Ok(path),
            Ok(Err(e)) if e == REPLACED => continue,
            Ok(Err(e)) => bail!("the session server could not start a session: {e}"),
            Err(_) => bail!("the session server ended without a session ({})", socket.display()),
        }
    }
    bail!("the session server at {} was replaced twice while asked", socket.display())
}

/// Asks the session server for a warm session, starting the server first if none listens.
pub fn connect(opts: &SessionOptions, sink: StreamSink) -> Result<RemoteSession> {
    let clock = Instant::now();
    let worker = ask(opts, "session")?;
    let stream =
        UnixStream::connect(&worker).with_context(|| format!("connecting to {}", worker.display()))?;
    let writer = Arc::new(Mutex::new(stream.try_clone()?));
    let cwd = std::env::current_dir().context("reading the working directory")?;
    let env = std::env::vars().filter(|(k, _)| !shapes_session(k)).collect();
    send_line(&writer, &Request::Hello { cwd, env })?;
    let mut reader = BufReader::new(stream);
    match read_reply(&mut reader)? {
        Reply::Ready => {}
        Reply::Failed(e) => bail!("the warm session refused this front end: {e}"),
        _ => bail!("the warm session answered out of turn"),
    }
    if crate::phases::enabled() {
        eprintln!("eager start: warm session from the session server: {} ms", clock.elapsed().as_millis());
    }
    let (tx, replies) = mpsc::channel();
    std::thread::Builder::new().name("eager-remote".into()).spawn(move || {
        while let Ok(reply) = read_reply(&mut reader) {
            match reply {
                Reply::Stream { stderr, line } => {
                    sink(if stderr { Stream::Stderr } else { Stream::Stdout }, &line);
                }
                other => {
                    if tx.send(other).is_err() {
                        return;
                    }
                }
            }
        }
    })?;
    Ok(RemoteSession { writer, replies })
}

fn read_reply(reader: &mut impl BufRead) -> Result<Reply> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        bail!("the session's process ended");
    }
    serde_json::from_str(&line).map_err(|e| anyhow!("a bad line from the session's process: {e}"))
}

/// Starts the server in a session of its own (a terminal's Ctrl-C or hang-up does not reach
/// it); its log is `session-server.log` in eager's cache dir.
fn spawn_server(socket: &Path, opts: &SessionOptions) -> Result<()> {
    let exe = std::env::current_exe()?;
    let log_path = eager::plugin::cache_dir().join("session-server.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("opening {}", log_path.display()))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg(SERVER_ARG)
        .arg(socket)
        .env(OPTIONS_ENV, serde_json::to_string(opts)?)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log);
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("starting the session server")?;
    // Reaped when it exits (after its idle time), so no zombie outlives it in this process.
    std::thread::spawn(move || child.wait());
    Ok(())
}

fn wait_for_server(socket: &Path) -> Result<UnixStream> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match UnixStream::connect(socket) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() > deadline => {
                return Err(e)
                    .with_context(|| format!("the session server did not listen on {}", socket.display()))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

impl Drop for RemoteSession {
    fn drop(&mut self) {
        // Hangs up for every handle (an interrupter may hold a copy): the session's process ends.
        if let Ok(w) = self.writer.lock() {
            let _ = w.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl RemoteSession {
    fn call(&mut self, req: &Request) -> Option<Reply> {
        send_line(&self.writer, req).ok()?;
        self.replies.recv().ok()
    }
}

fn lost() -> CellError {
    CellError::new(
        "SessionLost",
        "the process holding this session ended (its variables are gone): restart the REPL or the kernel",
    )
}

impl Engine for RemoteSession {
    fn eval(&mut self, cell: &str) -> Result<Vec<Output>, CellError> {
        match self.call(&Request::Eval(cell.to_string())) {
            Some(Reply::Eval(r)) => r,
            _ => Err(lost()),
        }
    }
    fn completions(&mut self, src: &str, pos: usize) -> (usize, Vec<Completion>) {
        match self.call(&Request::Complete { src: src.to_string(), pos }) {
            Some(Reply::Complete(start, list)) => (start, list),
            _ => (pos, vec![]),
        }
    }
    fn hover(&mut self, src: &str, pos: usize) -> Option<String> {
        match self.call(&Request::Hover { src: src.to_string(), pos }) {
            Some(Reply::Hover(h)) => h,
            _ => None,
        }
    }
    fn interrupter(&self) -> Interrupter {
        Interrupter::remote(self.writer.clone())
    }
    fn set_cell_number(&mut self, n: u64) {
        let _ = send_line(&self.writer, &Request::CellNumber(n));
    }
    fn comm(&mut self, message: serde_json::Value) -> Result<serde_json::Value, String> {
        match self.call(&Request::Comm(message)) {
            Some(Reply::Comm(r)) => r,
            _ => Err(lost().evalue),
        }
    }
}
