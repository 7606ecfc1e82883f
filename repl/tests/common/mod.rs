//! What the session server's tests share: the processes of a test's own server (found by the
//! runtime dir their command lines name), waiting for them, and killing what a failed test
//! left. Each test binary uses a part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// (pid, command line) of the live processes (zombies left out) whose command line names
/// `needle`.
pub fn processes_naming(needle: &str) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(needle) && alive(pid) {
            found.push((pid, cmdline));
        }
    }
    found
}

/// Whether `pid` runs (a zombie has ended: only its parent has not collected it yet).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// Waits until `check` holds, failing with `what` after `limit`.
pub fn wait_until(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < limit, "{what} after {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Kills what the test's server left (a failed assertion must not leave it running): every
/// process naming the runtime dir.
pub struct KillAll(pub PathBuf);

impl Drop for KillAll {
    fn drop(&mut self) {
        for (pid, _) in processes_naming(&self.0.to_string_lossy()) {
            // SAFETY: a signal to a process of this test's server.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    }
}

/// The server's socket (its one `server-*.sock`).
pub fn server_socket(runtime: &Path) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(runtime.join("eager"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().unwrap().to_string_lossy().starts_with("server-")
                && p.extension().is_some_and(|e| e == "sock")
        })
        .collect();
    assert_eq!(found.len(), 1, "one server socket: {found:?}");
    found[0].clone()
}
