//! The exit guard: when the process exits, the background work stops before XLA's statics
//! are destroyed. That work is the warm start's loads (`start`'s) and the optimized compiles
//! (`tiers`'): each room hands in how its own stops ([`at_exit_stop_loads`],
//! [`at_exit_wait_for_compiles`]), so the guard names neither.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::shared::Shared;

extern "C" {
    /// The C library's: `f` runs at `exit`, before the handlers registered earlier.
    fn atexit(f: extern "C" fn()) -> std::ffi::c_int;
}

/// What the exit stops, as the rooms handed it in, and where the exit stands.
#[derive(Default)]
struct Exit {
    /// Stops the warm start's loads (`start`'s, see [`at_exit_stop_loads`]).
    stop_loads: OnceLock<fn()>,
    /// Waits, until the deadline at most, for the optimized compiles queued or running
    /// (`tiers`', see [`at_exit_wait_for_compiles`]).
    wait_for_compiles: OnceLock<fn(Option<Instant>)>,
    /// The process is exiting: background work still queued is dropped (see [`exiting`]).
    closing: AtomicBool,
    /// Times the exit hook was registered.
    hooks: AtomicUsize,
}

static EXIT: Shared<Exit> = Shared::new("eager::runtime::Exit", Exit::default);

/// Has the exit stop the warm start's loads with `stop` (`start` hands it in as a runtime
/// starts; the first one handed in is kept: every copy of this library stops the same loads).
pub(super) fn at_exit_stop_loads(stop: fn()) {
    let _ = EXIT.get().stop_loads.set(stop);
}

/// Has the exit wait for the optimized compiles with `wait`, given the deadline (`tiers`
/// hands it in as it queues a key; the first one handed in is kept).
pub(super) fn at_exit_wait_for_compiles(wait: fn(Option<Instant>)) {
    let _ = EXIT.get().wait_for_compiles.set(wait);
}

/// Whether the process is exiting: background work still queued is to be dropped.
pub(super) fn exiting() -> bool {
    EXIT.get().closing.load(Ordering::Acquire)
}

/// Whether the exit hook was registered yet (see [`hook_exit`]).
pub(super) fn exit_hooked() -> bool {
    EXIT.get().hooks.load(Ordering::Acquire) > 0
}

/// At exit the plugin's C++ statics are destroyed while a background compile or load may
/// still use them (seen: crashes in MLIR's registries as a test binary ended). Exit handlers
/// run last registered first, so this hook runs before the destructors of statics that
/// existed when it was registered: it stops the warm start's loads, drops the queued keys and
/// waits for the compile in flight (at most 10 s). It is registered at the first promotion,
/// after the warm start's first load, and again after each of the first [`EXIT_HOOKS`]
/// optimized compiles (each may make statics of its own).
extern "C" fn finish_background_work_at_exit() {
    let exit = EXIT.get();
    if let Some(stop_loads) = exit.stop_loads.get() {
        stop_loads();
    }
    exit.closing.store(true, Ordering::Release);
    if let Some(wait) = exit.wait_for_compiles.get() {
        wait(Some(Instant::now() + Duration::from_secs(10)));
    }
}

/// Stops the background work when the process exits, before anything of XLA's is destroyed.
///
/// glibc's `exit` first runs the exiting thread's thread-local destructors, and only then the
/// `atexit` handlers and C++ static destructors (`__run_exit_handlers` calls
/// `__call_tls_dtors` first). A guard in the main thread's thread-locals therefore runs before
/// any of the plugin's statics go, however the process exits: `main` returning,
/// `std::process::exit`, a test harness ending, a panic leaving `main`. (An `atexit` handler
/// is no such guarantee: statics that XLA makes later, during a compile, are destroyed before
/// it runs.)
struct ExitGuard;

impl Drop for ExitGuard {
    fn drop(&mut self) {
        finish_background_work_at_exit();
        // Ops still running on the device use XLA's thread pools too (bounded: a long op must
        // not hold the exit for good).
        crate::profiler::wait_for_ops_until(Instant::now() + Duration::from_secs(10));
    }
}

thread_local! {
    static EXIT_GUARD: ExitGuard = const { ExitGuard };
}

/// Places the exit guard in the main thread's thread-locals, once per process (every copy of
/// this library in a REPL session shares one). On other threads it does nothing: their
/// thread-locals die when the thread ends, which is no exit.
pub(super) fn guard_exit() {
    static GUARDED: Shared<AtomicBool> = Shared::new("eager::runtime::ExitGuarded", AtomicBool::default);
    // SAFETY: two syscalls with no arguments that only read the caller's ids.
    let main_thread = unsafe { libc::syscall(libc::SYS_gettid) == libc::getpid() as libc::c_long };
    if main_thread && !GUARDED.get().swap(true, Ordering::AcqRel) {
        EXIT_GUARD.with(|_| ());
    }
}

/// Runs [`guard_exit`] as the library is loaded, on the main thread (a test harness, for one,
/// runs eager only on other threads and exits from the main one).
#[used]
#[link_section = ".init_array"]
static GUARD_EXIT_AT_LOAD: extern "C" fn() = {
    extern "C" fn guard_exit_at_load() {
        guard_exit();
    }
    guard_exit_at_load
};

/// Registrations of [`finish_background_work_at_exit`] at most (later compiles rarely make new
/// statics; each registration is one more handler run at exit).
const EXIT_HOOKS: usize = 24;

pub(super) fn hook_exit() {
    let p = EXIT.get();
    if p.hooks
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < EXIT_HOOKS).then_some(n + 1))
        .is_ok()
    {
        // SAFETY: registers a plain function with no captured state; atexit has no other effect.
        unsafe { atexit(finish_background_work_at_exit) };
    }
}
