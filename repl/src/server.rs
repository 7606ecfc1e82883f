//! The per-user session server, as Gradle's daemon or Python's forkserver: it keeps warm
//! sessions (evcxr's context, eager preloaded, the plugin up) ready in processes of their own,
//! hands one to each front end that asks, and starts their replacements. Two modes of the
//! front end's own binary (evcxr's cell process must be that binary, see `child_hook`):
//! - `--eager-session-server SOCKET`: listens on SOCKET (in the user's 0700 runtime dir, the
//!   file 0600), one server per socket (an flock). Each request is answered on a thread of its
//!   own, so a request waiting for a spare never holds up another: `session` gets a ready
//!   spare's socket (handed over), `warm` the same without taking it, `stop` ends the server.
//!   It keeps one spare, two where memory allows ([`spares_wanted`]). It exits, its unclaimed
//!   spares with it, after `EAGER_SESSION_IDLE_SECS` (default 3600) without a request, on
//!   `stop`, and within a second of its binary being replaced (a rebuild), so that rebuilds do
//!   not pile up servers.
//! - `--eager-session-worker SOCKET`: starts a [`Session`], says `ready` on stdout, serves the
//!   one front end that connects (never a second: the socket is removed at once) and exits when
//!   that connection closes, a crashed front end's too. Unclaimed, it exits when the server's
//!   end of its stdin closes, or [`CLAIM_SECS`] after the server said it was handed over (the
//!   front end died between the answer and connecting).
//!
//! A front end that hangs up before its answer does not consume a spare: the answer's write
//! fails and the spare stays. Neither process starts a PJRT client (only the cell process
//! does), so spawning from them is safe (a fork after a client exists can hang).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::engine::Engine;
use crate::interface::{SessionOptions, Stream, StreamSink};
use crate::protocol::{send_line, Reply, Request, OPTIONS_ENV, REPLACED, SERVER_ARG, WORKER_ARG};
use crate::session::Session;

/// Seconds a handed-over session waits for its front end to connect before it exits.
pub(crate) const CLAIM_SECS: u64 = 5;

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

/// How many spares to keep: `EAGER_SESSION_SPARES` (at least 1), else two when the machine has
/// 8 GiB available (a spare holds about 1 GB, see the guide), so that a session asked for right
/// after another (a kernel restart) finds one ready; else one.
fn spares_wanted() -> usize {
    if let Some(n) = std::env::var("EAGER_SESSION_SPARES").ok().and_then(|s| s.parse::<usize>().ok()) {
        return n.max(1);
    }
    let available_kib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines().find_map(|l| {
            l.strip_prefix("MemAvailable:")?.trim().trim_end_matches("kB").trim().parse::<u64>().ok()
        })
    });
    if available_kib.is_some_and(|kib| kib >= 8 << 20) {
        2
    } else {
        1
    }
}

/// A spare session's process: its stdin is held open while it is unclaimed (its end tells it
/// the server is gone; a `handed` line that it was handed over), and kept after the hand-over
/// too, so that it cannot end a session.
struct WorkerProcess {
    child: Child,
    stdin: ChildStdin,
    socket: PathBuf,
}

/// The spares: the ready ones (oldest first), how many are starting, the last failed start's
/// error (answered to the next request, which then tries again).
#[derive(Default)]
struct Pool {
    ready: VecDeque<PathBuf>,
    starting: usize,
    failed: Option<String>,
    workers: Vec<WorkerProcess>,
    started: u32,
    last_request: Option<Instant>,
}

/// The binary a server runs: a rebuild replaces the file (another inode, size or time).
#[derive(PartialEq, Eq)]
struct BinaryId(u64, u64, u64, i64, i64);

impl BinaryId {
    fn of(path: &Path) -> Option<BinaryId> {
        let m = std::fs::metadata(path).ok()?;
        Some(BinaryId(m.dev(), m.ino(), m.len(), m.mtime(), m.mtime_nsec()))
    }
}

struct Server {
    socket: PathBuf,
    pool: Mutex<Pool>,
    changed: Condvar,
    exe: PathBuf,
    binary: Option<BinaryId>,
    started: Instant,
}

fn serve(socket: &Path) -> Result<()> {
    // One server per socket. A server that is leaving (replaced, stopped) still holds the
    // lock for a moment: a new one waits for it, a second new one leaves.
    let lock = std::fs::File::create(socket.with_extension("lock"))?;
    let deadline = Instant::now() + Duration::from_secs(3);
    // SAFETY: flock on a descriptor this function owns.
    while unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        if Instant::now() > deadline {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let listener = listen(socket)?;
    let idle = std::env::var("EAGER_SESSION_IDLE_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(3600);
    let idle = Duration::from_secs(idle);
    let exe = std::env::current_exe().context("finding this program")?;
    let server = Arc::new(Server {
        socket: socket.to_path_buf(),
        pool: Mutex::default(),
        changed: Condvar::new(),
        binary: BinaryId::of(&exe),
        exe,
        started: Instant::now(),
    });
    server.fill(Duration::ZERO);
    eprintln!("eager session server {} listening on {}", std::process::id(), socket.display());
    loop {
        if readable(listener.as_raw_fd(), Duration::from_secs(1)) {
            if let Ok((client, _)) = listener.accept() {
                server.pool().last_request = Some(Instant::now());
                let server = server.clone();
                std::thread::spawn(move || server.answer(client));
            }
        }
        server.reap();
        if server.replaced() {
            server.exit("its binary was replaced");
        }
        let last = server.pool().last_request.unwrap_or(server.started);
        if last.elapsed() > idle {
            server.exit(&format!("idle for {} s", idle.as_secs()));
        }
    }
}

/// A replacement waits a moment after a hand-over: its build would slow the user's first cells.
fn spare_delay() -> Duration {
    let ms = std::env::var("EAGER_SESSION_SPARE_DELAY_MS").ok().and_then(|s| s.parse().ok()).unwrap_or(3000);
    Duration::from_millis(ms)
}

/// Whether `fd` has something to read (or its peer hung up) within `timeout`.
fn readable(fd: i32, timeout: Duration) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd that lives across the call.
    unsafe { libc::poll(&mut p, 1, timeout.as_millis() as libc::c_int) > 0 }
}

/// Whether the peer of `client` has hung up (it sends nothing after its request line).
fn hung_up(client: &UnixStream) -> bool {
    let mut p = libc::pollfd { fd: client.as_raw_fd(), events: libc::POLLRDHUP, revents: 0 };
    // SAFETY: one pollfd that lives across the call.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

impl Server {
    fn pool(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn replaced(&self) -> bool {
        self.binary.is_some() && BinaryId::of(&self.exe) != self.binary
    }

    /// Ends the server: its socket goes first (a new front end starts a new server), then the
    /// process, and with it the stdin of every unclaimed spare, which then exits.
    fn exit(&self, why: &str) -> ! {
        eprintln!("eager session server {}: {why}, exiting", std::process::id());
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_file(self.socket.with_extension("lock"));
        std::process::exit(0);
    }

    /// Starts a spare after `delay` if fewer than [`spares_wanted`] are ready or starting, one
    /// at a time (two builds at once would slow the first); the next follows when it is ready.
    fn fill(self: &Arc<Self>, delay: Duration) {
        let mut pool = self.pool();
        if pool.starting > 0 || pool.failed.is_some() || pool.ready.len() >= spares_wanted() {
            return;
        }
        pool.starting += 1;
        pool.started += 1;
        let socket =
            self.socket.with_file_name(format!("session-{}-{}.sock", std::process::id(), pool.started));
        drop(pool);
        let server = self.clone();
        std::thread::spawn(move || {
            std::thread::sleep(delay);
            let started = start_worker(&server.exe, &socket);
            let mut pool = server.pool();
            pool.starting -= 1;
            let ok = match started {
                Ok(worker) => {
                    pool.workers.push(worker);
                    pool.ready.push_back(socket);
                    true
                }
                Err(e) => {
                    pool.failed = Some(e);
                    false
                }
            };
            drop(pool);
            server.changed.notify_all();
            // The next spare waits as a replacement does: this one may be handed over now.
            if ok {
                server.fill(spare_delay());
            }
        });
    }

    /// Collects the session processes that ended; a spare that died is no longer offered.
    fn reap(self: &Arc<Self>) {
        let mut pool = self.pool();
        let mut gone = Vec::new();
        pool.workers.retain_mut(|w| {
            let alive = matches!(w.child.try_wait(), Ok(None));
            if !alive {
                gone.push(w.socket.clone());
            }
            alive
        });
        let before = pool.ready.len();
        pool.ready.retain(|s| !gone.contains(s));
        let lost = pool.ready.len() < before;
        drop(pool);
        if lost {
            self.fill(Duration::ZERO);
        }
    }

    /// Answers one request (see the module's doc).
    fn answer(self: Arc<Self>, client: UnixStream) {
        let mut request = String::new();
        let _ = client.set_read_timeout(Some(Duration::from_secs(10)));
        if BufReader::new(&client).read_line(&mut request).is_err() {
            return;
        }
        let take = match request.trim() {
            "session" => true,
            "warm" => false,
            "stop" => {
                let _ = writeln!(
                    &client,
                    "{}",
                    serde_json::to_string(&Ok::<_, String>("stopped")).unwrap_or_default()
                );
                self.exit("asked to stop");
            }
            _ => return,
        };
        if self.replaced() {
            // The front end starts a server of the new binary once this one has gone.
            let _ = std::fs::remove_file(&self.socket);
            let _ = writeln!(
                &client,
                "{}",
                serde_json::to_string(&Err::<PathBuf, _>(REPLACED)).unwrap_or_default()
            );
            self.exit("its binary was replaced");
        }
        let mut pool = self.pool();
        let answer: Result<PathBuf, String> = loop {
            if let Some(path) = pool.ready.front() {
                break Ok(path.clone());
            }
            if let Some(e) = pool.failed.take() {
                break Err(e);
            }
            if pool.starting == 0 {
                drop(pool);
                self.fill(Duration::ZERO);
                pool = self.pool();
                continue;
            }
            pool = self
                .changed
                .wait_timeout(pool, Duration::from_millis(500))
                .unwrap_or_else(|p| p.into_inner())
                .0;
            if hung_up(&client) {
                return;
            }
        };
        if take {
            if let Ok(path) = &answer {
                pool.ready.retain(|p| p != path);
            }
        }
        drop(pool);
        let line = serde_json::to_string(&answer).unwrap_or_default();
        let written = writeln!(&client, "{line}");
        match (&answer, written) {
            // Gone before its answer: the spare stays.
            (Ok(path), Err(_)) if take => {
                self.pool().ready.push_front(path.clone());
                self.changed.notify_all();
            }
            (Ok(path), Ok(())) if take => {
                if let Some(w) = self.pool().workers.iter_mut().find(|w| &w.socket == path) {
                    let _ = writeln!(w.stdin, "handed");
                }
                self.fill(spare_delay());
            }
            (Err(_), _) => self.fill(Duration::ZERO),
            _ => {}
        }
    }
}

/// Starts a session process and waits for its `ready` (or its error).
fn start_worker(exe: &Path, socket: &Path) -> Result<WorkerProcess, String> {
    let spawned = Command::new(exe)
        .arg(WORKER_ARG)
        .arg(socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn();
    let mut child = spawned.map_err(|e| format!("starting a session process: {e}"))?;
    let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
    let mut line = String::new();
    let _ = stdout.map(|s| BufReader::new(s).read_line(&mut line));
    let fail = |e: String, mut child: Child| {
        let _ = child.kill();
        let _ = child.wait();
        Err(e)
    };
    match (line.trim(), stdin) {
        ("ready", Some(stdin)) => Ok(WorkerProcess { child, stdin, socket: socket.to_path_buf() }),
        ("", _) => fail("the session process ended while it started (see session-server.log)".into(), child),
        (other, _) => fail(other.trim_start_matches("failed: ").to_string(), child),
    }
}

/// One session for one front end: started, announced, handed over, served until the front end
/// hangs up.
fn serve_one(socket: &Path) -> Result<()> {
    let listener = listen(socket)?;
    let claimed = Arc::new(AtomicBool::new(false));
    {
        // The server's end of stdin: `handed` starts the claim clock; its close (the server
        // gone) ends an unclaimed session.
        let claimed = claimed.clone();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if line.trim() == "handed" {
                    let claimed = claimed.clone();
                    std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_secs(CLAIM_SECS));
                        if !claimed.load(Ordering::SeqCst) {
                            eprintln!(
                                "eager session {}: handed over but not claimed in {CLAIM_SECS} s, exiting",
                                std::process::id()
                            );
                            std::process::exit(0);
                        }
                    });
                }
            }
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
        // The front end hung up (or died), maybe mid-cell: the cell stops with the cell
        // process, the request loop ends, and the session's process with it (at the latest
        // 5 s from now).
        interrupter.kill();
        drop(tx);
        std::thread::sleep(Duration::from_secs(5));
        std::process::exit(0);
    })?;
    for req in rx {
        let reply = match req {
            Request::Eval(cell) => Reply::Eval(session.eval(&cell)),
            Request::Complete { src, pos } => {
                let (start, list) = session.completions(&src, pos);
                Reply::Complete(start, list)
            }
            Request::Hover { src, pos } => Reply::Hover(Engine::hover(&mut session, &src, pos)),
            Request::Comm(message) => Reply::Comm(Engine::comm(&mut session, message)),
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
