//! What a session leaves on disk, kept bounded whatever way the session ends:
//! - control sockets live in a per-user runtime dir (`$XDG_RUNTIME_DIR/eager`, else
//!   `<tmp>/eager-<uid>`, mode 0700, refused if another user owns it); a socket nobody listens
//!   on any more (its session was killed) is removed when the next session starts;
//! - a cell's shared library (`libcode_N.so` in evcxr's target dir, 4–5 MB each) is removed as
//!   soon as the cell process has loaded it (Linux keeps a mapped file's pages until it is
//!   unmapped), and any a killed session left when the next session takes its build dir.

use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{anyhow, Context, Result};

/// The per-user dir the sessions' control sockets live in, created (0700) if missing.
pub fn runtime_dir() -> Result<PathBuf> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(xdg) if xdg.is_absolute() && xdg.is_dir() => xdg.join("eager"),
        _ => std::env::temp_dir().join(format!("eager-{uid}")),
    };
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
    }
    // Not followed: a link planted in a shared /tmp must not redirect our sockets.
    let meta = std::fs::symlink_metadata(&dir).with_context(|| format!("reading {}", dir.display()))?;
    if !meta.is_dir() || meta.uid() != uid {
        return Err(anyhow!(
            "{} is not a directory owned by this user (uid {uid}): eager will not put its control sockets there",
            dir.display()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("making {} private", dir.display()))?;
    }
    Ok(dir)
}

/// A fresh control socket path in `dir` for a session of this process.
pub fn control_socket_path(dir: &Path) -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    dir.join(format!("control-{}-{}.sock", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)))
}

/// Removes the sockets in `dir` that nobody listens on (their sessions ended without cleaning
/// up: a kill, a crash), and the `eager-*.sock` files earlier versions left in the temp dir.
/// Returns how many were removed.
pub fn remove_stale_sockets(dir: &Path) -> usize {
    let ours = std::fs::read_dir(dir).into_iter().flatten().flatten().filter(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        // A session-server's spare is not probed (a connection claims it): its server's
        // process is asked instead.
        name.starts_with("control-") || name.starts_with("server-") || spare_orphaned(&name)
    });
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let legacy = std::fs::read_dir(std::env::temp_dir()).into_iter().flatten().flatten().filter(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        name.starts_with("eager-")
            && name.ends_with(".sock")
            && e.path().symlink_metadata().is_ok_and(|m| m.uid() == uid)
    });
    let mut removed = 0;
    for entry in ours.chain(legacy) {
        let path = entry.path();
        let is_socket = entry.file_type().is_ok_and(|t| {
            use std::os::unix::fs::FileTypeExt;
            t.is_socket()
        });
        let name = entry.file_name().to_string_lossy().into_owned();
        // A listener answers at once; refused (or any failure) means its process is gone.
        let stale = if name.starts_with("session-") {
            spare_orphaned(&name)
        } else {
            UnixStream::connect(&path).is_err()
        };
        if is_socket && stale && std::fs::remove_file(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// A spare session's socket (`session-<server pid>-<n>.sock`) whose server is gone.
fn spare_orphaned(name: &str) -> bool {
    let pid =
        name.strip_prefix("session-").and_then(|r| r.split('-').next()).and_then(|p| p.parse::<i32>().ok());
    // SAFETY: signal 0 checks that the process exists and sends nothing.
    pid.is_some_and(|pid| unsafe { libc::kill(pid, 0) } != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH))
}

/// The cell libraries evcxr built in `build_dir`: `target/<triple>/debug/libcode_N.so` (the
/// copy evcxr renames cargo's output to and loads), and any in `deps` beside it.
fn cell_libraries(build_dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for triple in std::fs::read_dir(build_dir.join("target")).into_iter().flatten().flatten() {
        let debug = triple.path().join("debug");
        for entry in [debug.clone(), debug.join("deps")]
            .iter()
            .flat_map(|dir| std::fs::read_dir(dir).into_iter().flatten().flatten())
        {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("libcode_") && name.ends_with(".so") {
                found.push(entry.path());
            }
        }
    }
    found
}

/// Removes the cell libraries in `build_dir` (the cell process keeps those it loaded mapped);
/// returns the bytes freed.
pub fn remove_cell_libraries(build_dir: &Path) -> u64 {
    let mut freed = 0;
    for lib in cell_libraries(build_dir) {
        let size = lib.metadata().map(|m| m.len()).unwrap_or(0);
        if std::fs::remove_file(&lib).is_ok() {
            freed += size;
        }
    }
    freed
}

/// A build dir of evcxr's that no other session uses now: `<base>/0`, `<base>/1`, … each held
/// by a file lock for the session's life, so the dependency build is reused, never shared. A
/// new one starts as a copy of a built one (seconds, where building eager into it takes
/// minutes): the session server's spare and the session in use need two.
pub fn lock_build_dir(base: &Path) -> Result<(PathBuf, std::fs::File)> {
    for i in 0..16 {
        let dir = base.join(i.to_string());
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let lock = std::fs::File::create(dir.join(".session.lock"))?;
        if lock.try_lock().is_ok() {
            if !dir.join("target").exists() {
                seed_build_dir(base, &dir);
            }
            return Ok((dir, lock));
        }
    }
    Err(anyhow!("16 eager sessions are running already (build dirs under {} are all locked)", base.display()))
}

/// Copies a sibling's build (`target/`, `Cargo.lock`) into the new build dir `dir`, mtimes kept
/// so that cargo finds the dependencies fresh; nothing (cargo builds) if none is built or the
/// copy fails.
fn seed_build_dir(base: &Path, dir: &Path) {
    let Some(source) =
        (0..16).map(|i| base.join(i.to_string())).find(|d| d != dir && d.join("target/debug").is_dir())
    else {
        return;
    };
    let tmp = dir.join(format!("target.seed-{}", std::process::id()));
    let copied = std::process::Command::new("cp")
        .args(["-a", "--reflink=auto"])
        .arg(source.join("target"))
        .arg(&tmp)
        .status()
        .is_ok_and(|s| s.success());
    if copied && std::fs::rename(&tmp, dir.join("target")).is_ok() {
        let _ = std::fs::copy(source.join("Cargo.lock"), dir.join("Cargo.lock"));
        // Cell libraries the source held are not ours to load.
        remove_cell_libraries(dir);
    } else {
        let _ = std::fs::remove_dir_all(&tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn a_socket_nobody_listens_on_is_removed_and_a_live_one_stays() {
        let dir = tempfile::tempdir().unwrap();
        let live = control_socket_path(dir.path());
        let _listener = UnixListener::bind(&live).unwrap();
        let dead = control_socket_path(dir.path());
        drop(UnixListener::bind(&dead).unwrap());
        // Not a socket: never touched.
        let other = dir.path().join("control-notes.txt");
        std::fs::write(&other, "x").unwrap();
        assert!(dead.exists());
        assert!(remove_stale_sockets(dir.path()) >= 1);
        assert!(!dead.exists(), "the stale socket is gone");
        assert!(live.exists(), "a socket with a listener stays");
        assert!(other.exists());
    }

    #[test]
    fn cell_libraries_are_removed_and_other_files_kept() {
        let dir = tempfile::tempdir().unwrap();
        let debug = dir.path().join("target/x86_64-unknown-linux-gnu/debug");
        let deps = debug.join("deps");
        std::fs::create_dir_all(&deps).unwrap();
        for name in ["libcode_1.so", "libcode_42.so"] {
            std::fs::write(debug.join(name), vec![0u8; 1000]).unwrap();
        }
        std::fs::write(deps.join("libcode_3.so"), vec![0u8; 500]).unwrap();
        std::fs::write(deps.join("libeager-abc.rlib"), "keep").unwrap();
        std::fs::write(debug.join("libctx.so"), "keep").unwrap();
        assert_eq!(remove_cell_libraries(dir.path()), 2500);
        let mut left: Vec<_> = std::fs::read_dir(&debug).unwrap().map(|e| e.unwrap().file_name()).collect();
        left.extend(std::fs::read_dir(&deps).unwrap().map(|e| e.unwrap().file_name()));
        left.sort();
        assert_eq!(left, ["deps", "libctx.so", "libeager-abc.rlib"].map(std::ffi::OsString::from));
    }

    #[test]
    fn the_runtime_dir_is_private() {
        let dir = runtime_dir().unwrap();
        let mode = std::fs::metadata(&dir).unwrap().mode();
        assert_eq!(mode & 0o777, 0o700, "{}", dir.display());
    }
}
