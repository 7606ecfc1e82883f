//! The eager session engine: Rust cells evaluated by evcxr with eager preloaded, meta
//! commands (`:profile`, `:timeline`, `:cache`, …) answered from the session's profiler log,
//! and rendering of values and errors. The terminal REPL (`eager-repl`) and the Jupyter kernel
//! are thin front ends over [`Session`].
//!
//! How one eager runtime serves a whole session: evcxr runs cells in a child process that is
//! the front end's own binary (see [`child_hook`]), and loads every cell as its own shared
//! object with its own copy of eager's statics. The binary exports `EAGER_SESSION_SLOT`
//! ([`export_session_slot!`]); the first copy of eager that runs publishes its state there
//! and every later copy uses it (`eager::session`). That copy also serves a control socket,
//! which the host uses to read the profiler log and the cache, set the device and interrupt.

mod control;
pub mod input;
mod meta;
mod session;

pub use control::Control;
pub use meta::{MetaCommand, META_HELP};
pub use session::{CellError, Interrupter, Output, Session, SessionOptions, Stream, StreamSink};

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

/// Call first in `main`: when this process is evcxr's child (or its rustc wrapper) it runs as
/// that and never returns. The child ignores SIGINT: the host interrupts it through eager's
/// control socket, so a Ctrl-C in the terminal stops the running op, not the process and its
/// variables.
pub fn child_hook() {
    if std::env::var_os("EVCXR_IS_RUNTIME").is_some() {
        // SAFETY: setting a signal disposition before any thread starts.
        unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
    }
    evcxr::runtime_hook();
}
