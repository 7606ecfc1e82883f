//! The per-user session server, as Gradle's daemon or Python's forkserver: it keeps one session
//! started and warmed (evcxr's context, eager preloaded, the plugin up) in a process of its
//! own, hands it to the next front end that asks, and starts its replacement. Two modes of the
//! front end's own binary (evcxr's cell process must be that binary, see `child_hook`):
//! - `--eager-session-server SOCKET`: listens on SOCKET (in the user's 0700 runtime dir, the
//!   file 0600), one at a time per socket (an flock); answers `session` with the path of a
//!   ready session's socket; exits after `EAGER_SESSION_IDLE_SECS` (default 3600) without a
//!   request, and its unclaimed session with it.
//! - `--eager-session-worker SOCKET`: starts a [`Session`], says `ready` on stdout, serves the
//!   one front end that connects (never a second: the socket is removed at once) and exits when
//!   that connection closes, a crashed front end's too.
//!
//! Neither process starts a PJRT client (only the cell process does), so spawning from them is
//! safe (a fork after a client exists can hang).

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::engine::{send_line, Engine};
use crate::remote::{Reply, Request};
use crate::session::{Session, SessionOptions, Stream, StreamSink};

pub(crate) const SERVER_ARG: &str = "--eager-session-server";
pub(crate) const WORKER_ARG: &str = "--eager-session-worker";
/// The session options the server and its workers start with (JSON).
pub(crate) const OPTIONS_ENV: &str = "EAGER_SESSION_OPTIONS";

/// Runs this process as the session server or one of its sessions when its arguments say so;
/// returns otherwise.
pub(crate) fn hook() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().take(3).collect();
    let [_, mode, socket] = args.as_slice() else { return };
    let socket = PathBuf::from(socket);
    let code = if mode == SERVER_ARG {
        serve(&socket)
    } else if mode == WORKER_ARG {
        serve_one(&socket)
    } else {
        return;
    };
    if let Err(e) = code {
        eprintln!("eager session server ({}): {e:#}", socket.display());
        std::process::exit(1);
    }
    std::process::exit(0);
}

fn options() -> SessionOptions {
    std::env::var(OPTIONS_ENV).ok().and_then(|s| serde_json::from_str(&s).ok()).unwrap_or_default()
}

fn listen(socket: &Path) -> Result<UnixListener> {
    let _ = std::fs::remove_file(socket);
    let listener =
        UnixListener::bind(socket).with_context(|| format!("listening on {}", socket.display()))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// The spare session: starting, ready, or failed to start.
enum Spare {
    None,
    Starting,
    Ready(PathBuf),
    Failed(String),
}

/// A spare session's process: its stdin is held open while it is unclaimed (its end tells it
/// the server is gone), and kept after the hand-over too, so that it cannot end a session.
struct WorkerProcess {
    child: Child,
    _stdin: ChildStdin,
}

fn serve(socket: &Path) -> Result<()> {
    // One server per socket: a second one started at the same moment leaves.
    let lock = std::fs::File::create(socket.with_extension("lock"))?;
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Ok(());
    }
    let listener = listen(socket)?;
    let idle = std::env::var("EAGER_SESSION_IDLE_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(3600);
    let idle = Duration::from_secs(idle);
    let spare: Arc<(Mutex<Spare>, Condvar)> = Arc::new((Mutex::new(Spare::None), Condvar::new()));
    let workers: Arc<Mutex<Vec<WorkerProcess>>> = Arc::default();
    let mut n = 0u32;
    start_spare(socket, &mut n, &spare, &workers, Duration::ZERO);
    let mut last = Instant::now();
    eprintln!("eager session server {} listening on {}", std::process::id(), socket.display());
    loop {
        if !readable(&listener, Duration::from_secs(1)) {
            reap(&workers);
            if last.elapsed() > idle {
                eprintln!(
                    "eager session server {}: idle for {} s, exiting",
                    std::process::id(),
                    idle.as_secs()
                );
                // Still holding the lock: no other server listens here yet.
                let _ = std::fs::remove_file(socket);
                let _ = std::fs::remove_file(socket.with_extension("lock"));
                return Ok(());
            }
            continue;
        }
        let Ok((client, _)) = listener.accept() else { continue };
        if hand_over(client, &spare) {
            start_spare(socket, &mut n, &spare, &workers, spare_delay());
        }
        last = Instant::now();
    }
}

/// A replacement waits a moment after a hand-over: its build would slow the user's first cells.
fn spare_delay() -> Duration {
    let ms = std::env::var("EAGER_SESSION_SPARE_DELAY_MS").ok().and_then(|s| s.parse().ok()).unwrap_or(3000);
    Duration::from_millis(ms)
}

fn readable(listener: &UnixListener, timeout: Duration) -> bool {
    let mut fd = libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd that lives across the call.
    unsafe { libc::poll(&mut fd, 1, timeout.as_millis() as libc::c_int) > 0 }
}

/// Answers one request once the spare has started: `session` with the spare's socket (handed
/// over), `warm` with it too (kept). Whether a replacement is due.
fn hand_over(client: UnixStream, spare: &Arc<(Mutex<Spare>, Condvar)>) -> bool {
    let mut request = String::new();
    let _ = client.set_read_timeout(Some(Duration::from_secs(10)));
    if BufReader::new(&client).read_line(&mut request).is_err() {
        return false;
    }
    let take = match request.trim() {
        "session" => true,
        "warm" => false,
        _ => return false,
    };
    let (state, changed) = &**spare;
    let guard = state.lock().unwrap_or_else(|p| p.into_inner());
    let mut guard = changed
        .wait_while(guard, |s| matches!(s, Spare::Starting | Spare::None))
        .unwrap_or_else(|p| p.into_inner());
    let answer: Result<PathBuf, String> = match &*guard {
        Spare::Ready(path) => Ok(path.clone()),
        Spare::Failed(e) => Err(e.clone()),
        Spare::None | Spare::Starting => unreachable!("waited for a started spare"),
    };
    // A failed start is tried again by the next request.
    let handed = take || answer.is_err();
    if handed {
        *guard = Spare::None;
    }
    drop(guard);
    let mut client = client;
    let _ = writeln!(client, "{}", serde_json::to_string(&answer).unwrap_or_default());
    handed
}

/// Starts a spare session after `delay`, on a thread (the server goes on answering).
fn start_spare(
    socket: &Path,
    n: &mut u32,
    spare: &Arc<(Mutex<Spare>, Condvar)>,
    workers: &Arc<Mutex<Vec<WorkerProcess>>>,
    delay: Duration,
) {
    *n += 1;
    let path = socket.with_file_name(format!("session-{}-{}.sock", std::process::id(), n));
    let (spare, workers) = (spare.clone(), workers.clone());
    *spare.0.lock().unwrap_or_else(|p| p.into_inner()) = Spare::Starting;
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        let set = |s: Spare| {
            *spare.0.lock().unwrap_or_else(|p| p.into_inner()) = s;
            spare.1.notify_all();
        };
        let exe = match std::env::current_exe() {
            Ok(e) => e,
            Err(e) => return set(Spare::Failed(format!("finding this program: {e}"))),
        };
        let spawned = Command::new(exe)
            .arg(WORKER_ARG)
            .arg(&path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => return set(Spare::Failed(format!("starting a session process: {e}"))),
        };
        let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
        let mut line = String::new();
        let _ = stdout.map(|s| BufReader::new(s).read_line(&mut line));
        if let Some(stdin) = stdin {
            workers.lock().unwrap_or_else(|p| p.into_inner()).push(WorkerProcess { child, _stdin: stdin });
        }
        set(match line.trim() {
            "ready" => Spare::Ready(path),
            "" => Spare::Failed("the session process ended while it started (see session-server.log)".into()),
            other => Spare::Failed(other.trim_start_matches("failed: ").to_string()),
        });
    });
}

/// Collects the session processes that ended.
fn reap(workers: &Mutex<Vec<WorkerProcess>>) {
    workers.lock().unwrap_or_else(|p| p.into_inner()).retain_mut(|w| matches!(w.child.try_wait(), Ok(None)));
}

/// One session for one front end: started, announced, handed over, served until the front end
/// hangs up.
fn serve_one(socket: &Path) -> Result<()> {
    let listener = listen(socket)?;
    let claimed = Arc::new(AtomicBool::new(false));
    {
        // The server's end of stdin closes when it exits: an unclaimed session goes with it.
        let claimed = claimed.clone();
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
            if !claimed.load(Ordering::SeqCst) {
                std::process::exit(0);
            }
        });
    }
    let writer: Arc<Mutex<Option<Arc<Mutex<UnixStream>>>>> = Arc::default();
    let sink: StreamSink = {
        let writer = writer.clone();
        Arc::new(move |stream, line: &str| {
            let stderr = stream == Stream::Stderr;
            // Before the hand-over nobody reads the session's output.
            if let Some(w) = writer.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
                let _ = send_line(w, &Reply::Stream { stderr, line: line.to_string() });
            }
        })
    };
    let mut session = match Session::start(&options(), sink) {
        Ok(s) => s,
        Err(e) => {
            println!("failed: {}", format!("{e:#}").replace('\n', " "));
            return Ok(());
        }
    };
    println!("ready");
    std::io::stdout().flush()?;
    let (conn, _) = listener.accept()?;
    claimed.store(true, Ordering::SeqCst);
    let _ = std::fs::remove_file(socket);
    drop(listener);
    let out = Arc::new(Mutex::new(conn.try_clone()?));
    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let Ok(Request::Hello { cwd, env }) = serde_json::from_str(&line) else {
        anyhow::bail!("the front end did not say hello");
    };
    match session.adopt(&cwd, &env) {
        Ok(()) => send_line(&out, &Reply::Ready)?,
        Err(e) => return send_line(&out, &Reply::Failed(format!("{e:#}"))),
    }
    *writer.lock().unwrap_or_else(|p| p.into_inner()) = Some(out.clone());
    let interrupter = session.interrupter();
    let (tx, rx) = mpsc::channel::<Request>();
    std::thread::Builder::new().name("eager-session-requests".into()).spawn(move || {
        for line in reader.lines() {
            let Ok(line) = line else { break };
            match serde_json::from_str::<Request>(&line) {
                Ok(Request::Interrupt) => {
                    if let Err(e) = interrupter.interrupt() {
                        eprintln!("eager session {}: interrupt: {e:#}", std::process::id());
                    }
                }
                Ok(Request::Kill) => interrupter.kill(),
                Ok(req) => {
                    if tx.send(req).is_err() {
                        break;
                    }
                }
                Err(e) => eprintln!("eager session {}: bad request: {e}", std::process::id()),
            }
        }
        // The front end hung up (or died) mid-cell: the cell stops with the cell process, and
        // the session's process ends.
        interrupter.kill();
        std::thread::sleep(Duration::from_secs(10));
        std::process::exit(0);
    })?;
    // Ends when the front end hangs up (the reader's end drops the sender).
    for req in rx {
        let reply = match req {
            Request::Eval(cell) => Reply::Eval(session.eval(&cell)),
            Request::Complete { src, pos } => {
                let (start, list) = session.completions(&src, pos);
                Reply::Complete(start, list)
            }
            Request::Hover { src, pos } => Reply::Hover(Engine::hover(&mut session, &src, pos)),
            Request::CellNumber(n) => {
                session.set_cell_number(n);
                continue;
            }
            Request::Hello { .. } | Request::Interrupt | Request::Kill => continue,
        };
        if send_line(&out, &reply).is_err() {
            break;
        }
    }
    drop(session);
    Ok(())
}
