//! The eager session engine: Rust cells evaluated by evcxr with eager preloaded, meta
//! commands (`:profile`, `:timeline`, `:cache`, …) answered from the session's profiler log,
//! and rendering of values and errors. The terminal REPL (`eager-repl`) and the Jupyter kernel
//! are thin front ends over [`Session`].
//!
//! How one eager runtime serves a whole session: evcxr runs cells in a child process that is
//! the front end's own binary (see [`child_hook`]), and loads every cell as its own shared
//! object with its own copy of eager's statics. The binary exports `EAGER_SESSION_SLOT`
//! ([`export_session_slot!`]); the first copy of eager that runs publishes its state there
//! and every later copy uses it (`eager::shared`). Cells link the `eager-cell` crate (rich
//! display, the error block), whose first copy also serves a control socket, which the host
//! ([`Control`]) uses to read the profiler log and the cache, set the device and interrupt.

mod control;
mod engine;
mod files;
pub mod input;
mod interface;
mod meta;
mod names;
mod phases;
mod protocol;
pub mod remote;
mod server;
mod session;
mod worker;

pub use control::Control;
pub use engine::{Engine, Interrupter};
pub use interface::{CellError, Completion, Output, SessionOptions, Stream, StreamSink};
pub use meta::{MetaCommand, META_HELP};
/// Completions with no session (while it starts): meta commands and the index of public names.
pub use names::complete as complete_from_index;
pub use session::Session;
pub use worker::Worker;

/// Defines, in a front end's binary crate, the static the cells' copies of eager share their
/// runtime through (the bin's build script exports it with `--export-dynamic-symbol`).
#[macro_export]
macro_rules! export_session_slot {
    () => {
        #[no_mangle]
        pub static EAGER_SESSION_SLOT: ::std::sync::atomic::AtomicPtr<::std::ffi::c_void> =
            ::std::sync::atomic::AtomicPtr::new(::std::ptr::null_mut());
    };
}

/// Call first in `main`: when this process is evcxr's child (or its rustc wrapper), the session
/// server or one of its sessions, it runs as that and never returns. The child ignores SIGINT: the host interrupts it through eager's
/// control socket, so a Ctrl-C in the terminal stops the running op, not the process and its
/// variables.
pub fn child_hook() {
    if std::env::var_os("EVCXR_IS_RUNTIME").is_some() {
        // SAFETY: setting a signal disposition before any thread starts.
        unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
        // The cell process dies with the session that holds it, even mid-cell (its stdin's end
        // is only read between cells): a killed session leaves no orphan running a loop.
        // SAFETY: prctl on this process; getppid cannot fail.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() == 1 {
                libc::_exit(0);
            }
        }
        if let Err(e) = watch_cell_errors() {
            eprintln!("eager: cannot watch the cell process's output ({e}): `?` errors will not be reported as errors");
        }
    }
    if std::env::var_os("EVCXR_RUSTC_WRAPPER").is_some() {
        point_core_extern_at_rmeta();
    }
    evcxr::runtime_hook();
    // The session server and its sessions are this binary too.
    server::hook();
}

/// In evcxr's rustc wrapper (dylib mode): evcxr names `core=<sysroot>/libstd-*.so` for every
/// crate, and rustc 1.9x refuses that for a `#![no_std]` crate (libc): "only metadata stub
/// found for `dylib` dependency `core`". The `.rmeta` beside it has the full metadata.
fn point_core_extern_at_rmeta() {
    const VAR: &str = "EVCXR_CORE_EXTERN";
    let Some(value) = std::env::var_os(VAR) else { return };
    let value = value.to_string_lossy().into_owned();
    if let Some(so) = value.strip_prefix("core=").filter(|p| p.ends_with(".so")) {
        let rmeta = format!("{}.rmeta", so.trim_end_matches(".so"));
        if std::path::Path::new(&rmeta).is_file() {
            std::env::set_var(VAR, format!("core={rmeta}"));
        }
    }
}

/// The line evcxr's generated code prints when a cell's `?` returned an error (its message
/// went to stderr); evcxr's host consumes it and reports success.
const EVCXR_ERROR_LINE: &[u8] = b"EVCXR_ERROR_OCCURRED\n";
/// Written to the cell process's stderr after a failing cell's own lines (its message).
pub(crate) const STDERR_SYNC_LINE: &str = "EAGER_STDERR_SYNC";
/// The line evcxr's generated code prints when a cell panicked (the panic went to stderr).
const EVCXR_PANIC_LINE: &[u8] = b"EVCXR_PANIC_NOTIFICATION\n";

/// In the cell process: stdout goes through a pipe read by a thread that copies it on, and
/// puts an error block (`eager_cell::ERROR_MIME`) before evcxr's error and panic lines, so
/// the host learns at once that the cell failed (and asks the session's eager for the error's
/// kind) and waits for its message on stderr only then.
fn watch_cell_errors() -> std::io::Result<()> {
    use std::io::{BufRead, BufReader, Write};
    use std::os::fd::{FromRawFd, OwnedFd};

    let mut fds = [0; 2];
    // SAFETY: pipe writes two new descriptors into the array; dup and dup2 take descriptors
    // this process owns, and each one that ends up in an OwnedFd is owned by it alone.
    let (reader, mut out) = unsafe {
        if libc::pipe(fds.as_mut_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let real_stdout = libc::dup(1);
        if real_stdout < 0 || libc::dup2(fds[1], 1) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        libc::close(fds[1]);
        // Not for processes a cell starts: they keep the pipe's write end as their stdout.
        libc::fcntl(fds[0], libc::F_SETFD, libc::FD_CLOEXEC);
        libc::fcntl(real_stdout, libc::F_SETFD, libc::FD_CLOEXEC);
        (
            std::fs::File::from(OwnedFd::from_raw_fd(fds[0])),
            std::fs::File::from(OwnedFd::from_raw_fd(real_stdout)),
        )
    };
    std::thread::Builder::new().name("eager-stdout".into()).spawn(move || {
        let mut reader = BufReader::new(reader);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let ename = match line.as_slice() {
                EVCXR_ERROR_LINE => Some("Error"),
                EVCXR_PANIC_LINE => Some("panic"),
                _ => None,
            };
            if let Some(ename) = ename {
                let _ = writeln!(out, "{}", eager_cell::error_block(ename, None));
                // After everything the cell wrote to stderr: the host waits for this line.
                eprintln!("{STDERR_SYNC_LINE}");
            }
            if out.write_all(&line).and_then(|_| out.flush()).is_err() {
                return;
            }
        }
    })?;
    Ok(())
}
