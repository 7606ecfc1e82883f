//! The session server through the real `eager-repl` binary, with a runtime dir of its own (so a
//! server of its own): `--warm` starts it, a front end gets its warm session (which takes on
//! the front end's working directory and environment) and only that front end, two front ends
//! at once get two sessions, a front end killed mid-cell ends its session, a server killed
//! with its socket left behind is replaced, and an idle server exits with its spare.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{alive, processes_naming, server_socket, wait_until, KillAll};

/// Seconds without a request before the test's server exits.
const IDLE_SECS: u64 = 45;

fn repl(runtime: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_eager-repl"));
    cmd.env("XDG_RUNTIME_DIR", runtime)
        .env("EAGER_SESSION_SERVER", "1")
        .env("EAGER_SESSION_SPARE_DELAY_MS", "0")
        .env("EAGER_SESSION_IDLE_SECS", IDLE_SECS.to_string())
        .env_remove("EAGER_DEVICE")
        .env("TERM", "dumb");
    cmd
}

fn server_pid(runtime: &Path) -> Option<u32> {
    let needle = runtime.to_string_lossy().into_owned();
    processes_naming(&needle).into_iter().find(|(_, c)| c.contains("--eager-session-server")).map(|(p, _)| p)
}

fn parent_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command's `)`: state, then the parent's pid.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split(' ').nth(1).unwrap().parse().unwrap()
}

fn wait_gone(pid: u32, limit: Duration, what: &str) {
    wait_until(&format!("{what} (pid {pid}) still runs"), limit, || !alive(pid));
}

/// The `PID <n>` line a cell printed: the parent of the cell process, i.e. the session's host.
fn host_pid(stdout: &str) -> u32 {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("PID "))
        .unwrap_or_else(|| panic!("no PID line in {stdout:?}"));
    line.trim().parse().unwrap()
}

const PRINT_HOST: &str = r#"println!("PID {}", std::os::unix::process::parent_id());"#;

#[test]
fn the_session_server_hands_each_front_end_a_warm_session_of_its_own() {
    let runtime = tempfile::tempdir().unwrap();
    let rt = runtime.path().to_path_buf();
    let _cleanup = KillAll(rt.clone());

    // `--warm` starts the server and returns once its spare is ready.
    let warm = repl(&rt).arg("--warm").output().unwrap();
    assert!(warm.status.success(), "--warm failed: {}", String::from_utf8_lossy(&warm.stderr));
    let server = server_pid(&rt).expect("no session server after --warm");
    let server_socket = &server_socket(&rt);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(server_socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the server's socket is the user's alone");

    // The hand-over: the front end's directory and environment reach the cell, which runs in
    // a session process of the server.
    let work = tempfile::tempdir().unwrap();
    let code = format!(
        r#"{PRINT_HOST} println!("CWD {{}}", std::env::current_dir()?.display()); println!("VAR {{}}", std::env::var("FRONT_END_VAR")?);"#
    );
    let out = repl(&rt)
        .current_dir(work.path())
        .env("FRONT_END_VAR", "mine")
        .arg("-e")
        .arg(&code)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "the first front end failed: {stdout}\n{stderr}");
    assert!(!stderr.contains("no session from the session server"), "fell back to a local session: {stderr}");
    let host = host_pid(&stdout);
    assert_eq!(parent_of(host), server, "the session's process is the server's child");
    let cwd = work.path().canonicalize().unwrap();
    assert!(stdout.contains(&format!("CWD {}", cwd.display())), "the cell's working directory: {stdout}");
    assert!(stdout.contains("VAR mine"), "the front end's environment: {stdout}");
    // Its session ends with the front end.
    wait_gone(host, Duration::from_secs(30), "the first front end's session");

    // Two front ends at once: two sessions.
    let spawn =
        || repl(&rt).arg("-e").arg(PRINT_HOST).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let (a, b) = (spawn(), spawn());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert!(
        a.status.success() && b.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&a.stderr),
        String::from_utf8_lossy(&b.stderr)
    );
    let (ha, hb) =
        (host_pid(&String::from_utf8_lossy(&a.stdout)), host_pid(&String::from_utf8_lossy(&b.stdout)));
    assert_ne!(ha, hb, "two front ends shared one session");
    assert!(ha != host && hb != host, "a session was handed over twice");

    // A front end killed mid-cell: its session ends (the cell process with it). The cell
    // prints its own pid too: the cell process is found, not looked for.
    let mut c = repl(&rt).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let mut stdin = c.stdin.take().unwrap();
    writeln!(stdin, r#"{PRINT_HOST} println!("CELL {{}}", std::process::id());"#).unwrap();
    let mut lines = BufReader::new(c.stdout.take().unwrap()).lines();
    let mut next_line = || lines.next().expect("the front end ended before printing").unwrap();
    let host = loop {
        if let Some(p) = next_line().strip_prefix("PID ") {
            break p.trim().parse::<u32>().unwrap();
        }
    };
    let cell = loop {
        if let Some(p) = next_line().strip_prefix("CELL ") {
            break p.trim().parse::<u32>().unwrap();
        }
    };
    assert!(alive(cell), "no cell process {cell}");
    assert_eq!(parent_of(cell), host, "the cell process is the session's child");
    writeln!(stdin, "std::thread::sleep(std::time::Duration::from_secs(300));").unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert!(alive(host) && alive(cell), "the session and its cell process run until the front end is killed");
    c.kill().unwrap();
    let _ = c.wait();
    wait_gone(host, Duration::from_secs(30), "a killed front end's session");
    wait_gone(cell, Duration::from_secs(30), "a killed front end's cell process");

    // A server killed outright leaves its socket: the next front end gets a new server.
    // SAFETY: a signal to this test's server.
    unsafe { libc::kill(server as i32, libc::SIGKILL) };
    wait_gone(server, Duration::from_secs(10), "the killed server");
    assert!(server_socket.exists(), "the killed server's socket file stays behind");
    let out = repl(&rt).arg("-e").arg(PRINT_HOST).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success() && !stderr.contains("no session from the session server"), "{stderr}");
    let second = server_pid(&rt).expect("no server after the stale socket");
    assert_ne!(second, server);
    assert_eq!(parent_of(host_pid(&String::from_utf8_lossy(&out.stdout))), second);
    assert!(server_socket.exists(), "the new server listens on the same socket path");

    // Idle: the server exits with its spare, and takes its socket away.
    let deadline = Instant::now() + Duration::from_secs(IDLE_SECS + 90);
    while !processes_naming(&rt.to_string_lossy()).is_empty() {
        assert!(
            Instant::now() < deadline,
            "still running after the idle time: {:?}",
            processes_naming(&rt.to_string_lossy())
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(!server_socket.exists(), "the idle server left its socket");
}
