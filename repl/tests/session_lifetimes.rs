//! How long the session server and its sessions live, through a copy of the real `eager-repl`
//! binary in a temp dir (so that replacing it rebuilds nothing) and a runtime dir of the test's
//! own: a spare handed to a front end that never connects exits after the claim time; a front
//! end that hangs up while it waits leaves the spare to the next one; a server whose binary is
//! replaced exits with its spare and the next front end gets a server of the new binary;
//! `--stop-server` ends the server and its spare.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::{processes_naming, server_socket, wait_until, KillAll};

/// A copy of eager-repl at `dir/eager-repl` (a new inode each time: a rebuild as cargo makes it).
fn install_copy(dir: &Path) -> PathBuf {
    let exe = dir.join("eager-repl");
    let tmp = dir.join("eager-repl.new");
    std::fs::copy(env!("CARGO_BIN_EXE_eager-repl"), &tmp).unwrap();
    std::fs::rename(&tmp, &exe).unwrap();
    exe
}

fn repl(exe: &Path, runtime: &Path) -> Command {
    let mut cmd = Command::new(exe);
    cmd.env("XDG_RUNTIME_DIR", runtime)
        .env("EAGER_SESSION_SERVER", "1")
        .env("EAGER_SESSION_SPARE_DELAY_MS", "0")
        .env("EAGER_SESSION_SPARES", "1")
        .env("EAGER_SESSION_IDLE_SECS", "300")
        .env_remove("EAGER_DEVICE")
        .env("TERM", "dumb");
    cmd
}

fn server_pids(runtime: &Path) -> Vec<u32> {
    processes_naming(&runtime.to_string_lossy())
        .into_iter()
        .filter(|(_, c)| c.contains("--eager-session-server"))
        .map(|(p, _)| p)
        .collect()
}

/// The session processes: (pid, socket).
fn sessions(runtime: &Path) -> Vec<(u32, PathBuf)> {
    processes_naming(&runtime.to_string_lossy())
        .into_iter()
        .filter_map(|(p, c)| Some((p, PathBuf::from(c.split("--eager-session-worker").nth(1)?.trim()))))
        .collect()
}

/// Sends `request` to the server as a front end does; its answer line.
fn ask(socket: &Path, request: &str) -> String {
    let mut s = UnixStream::connect(socket).unwrap();
    writeln!(s, "{request}").unwrap();
    let mut answer = String::new();
    BufReader::new(&s).read_line(&mut answer).unwrap();
    answer
}

#[test]
fn spares_are_never_lost_nor_leaked_and_a_replaced_binary_takes_its_server_away() {
    let bin = tempfile::tempdir().unwrap();
    let runtime = tempfile::tempdir().unwrap();
    let rt = runtime.path().to_path_buf();
    let _cleanup = KillAll(rt.clone());
    let exe = install_copy(bin.path());

    let warm = repl(&exe, &rt).arg("--warm").output().unwrap();
    assert!(warm.status.success(), "--warm failed: {}", String::from_utf8_lossy(&warm.stderr));
    let server = server_pids(&rt);
    assert_eq!(server.len(), 1, "one server: {server:?}");
    let socket = server_socket(&rt);
    let spare = sessions(&rt);
    assert_eq!(spare.len(), 1, "one spare: {spare:?}");

    // Handed over to a front end that never connects: it exits after the claim time.
    let answer = ask(&socket, "session");
    assert!(answer.contains(&*spare[0].1.to_string_lossy()), "{answer}");
    let handed = Instant::now();
    // Meanwhile a front end asks while the replacement starts, and hangs up before its answer.
    {
        let mut s = UnixStream::connect(&socket).unwrap();
        writeln!(s, "session").unwrap();
    }
    wait_until("the unclaimed hand-over still runs", Duration::from_secs(5 + 5), || {
        sessions(&rt).iter().all(|(p, _)| *p != spare[0].0)
    });
    assert!(
        handed.elapsed() >= Duration::from_secs(4),
        "it exited before its claim time: {:?}",
        handed.elapsed()
    );
    // The replacement is not handed to the front end that hung up: it stays past a claim time,
    // and is the one offered next.
    wait_until("no replacement spare", Duration::from_secs(300), || {
        let s = sessions(&rt);
        s.len() == 1 && s[0].1.exists()
    });
    let replacement = sessions(&rt)[0].clone();
    assert_ne!(replacement.0, spare[0].0);
    std::thread::sleep(Duration::from_secs(5 + 2));
    assert_eq!(sessions(&rt), vec![replacement.clone()], "the spare after a hang-up");
    assert!(ask(&socket, "warm").contains(&*replacement.1.to_string_lossy()), "the same spare is offered");

    // A rebuilt binary: the old server exits at once, its spare with it.
    install_copy(bin.path());
    wait_until("the replaced binary's server still runs", Duration::from_secs(5), || {
        server_pids(&rt).is_empty()
    });
    wait_until("its spare still runs", Duration::from_secs(5), || sessions(&rt).is_empty());
    assert!(!socket.exists(), "the old server left its socket");
    // The next front end gets a server of the new binary, under the same name.
    let out = repl(&exe, &rt).arg("-e").arg("1 + 1").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains('2'), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("no session from the session server"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let new_server = server_pids(&rt);
    assert!(new_server.len() == 1 && new_server != server, "{new_server:?} after {server:?}");
    assert_eq!(server_socket(&rt), socket, "the same socket name for the rebuilt binary");

    // --stop-server: the server and its spare end.
    wait_until("no spare", Duration::from_secs(300), || sessions(&rt).len() == 1);
    let stop = repl(&exe, &rt).arg("--stop-server").output().unwrap();
    assert!(stop.status.success(), "{}", String::from_utf8_lossy(&stop.stderr));
    assert!(
        String::from_utf8_lossy(&stop.stderr).contains("stopped 1 session server"),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    wait_until("the stopped server or its spare still runs", Duration::from_secs(5), || {
        processes_naming(&rt.to_string_lossy()).is_empty()
    });
}
