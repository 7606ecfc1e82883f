//! Tiers over time: a key found hot is queued for its optimized compile on one background
//! thread (dispatch never waits on it) and swapped in when done; and the exit guard that stops
//! that background work (and the warm start's loads) before XLA's statics are destroyed.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::fetch::Program;
use super::runtime;
use super::start::disk_caches;
use crate::cache::{cache, OpKey};
use crate::pjrt::Tier;
use crate::profiler::OpInfo;
use crate::shared::{lock, Shared};

/// Hot keys waiting for their optimized compile, and the one background thread that compiles
/// them (a low-priority queue: dispatch never waits on it).
#[derive(Default)]
struct Promoter {
    queue: Mutex<Option<std::sync::mpsc::Sender<OpKey>>>,
    pending: Mutex<usize>,
    idle: std::sync::Condvar,
    /// The process is exiting: keys still queued are dropped (see
    /// [`finish_background_work_at_exit`]).
    closing: AtomicBool,
    /// Times the exit hook was registered.
    hooks: AtomicUsize,
    /// The op whose optimized executable is being compiled or loaded now.
    running: Mutex<Option<Arc<OpInfo>>>,
}

/// The op whose optimized executable the background thread compiles (or loads) now: its
/// signature (`exp(f32[257, 129])`).
pub fn background_compile() -> Option<String> {
    lock(&PROMOTER.get().running).as_ref().map(|info| info.signature())
}

static PROMOTER: Shared<Promoter> = Shared::new("eager::runtime::Promoter", Promoter::default);

extern "C" {
    /// The C library's: `f` runs at `exit`, before the handlers registered earlier.
    fn atexit(f: extern "C" fn()) -> std::ffi::c_int;
}

/// At exit the plugin's C++ statics are destroyed while a background compile or load may
/// still use them (seen: crashes in MLIR's registries as a test binary ended). Exit handlers
/// run last registered first, so this hook runs before the destructors of statics that
/// existed when it was registered: it stops the warm start's loads, drops the queued keys and
/// waits for the compile in flight (at most 10 s). It is registered at the first promotion,
/// after the warm start's first load, and again after each of the first [`EXIT_HOOKS`]
/// optimized compiles (each may make statics of its own).
extern "C" fn finish_background_work_at_exit() {
    for d in disk_caches() {
        d.stop_preloading();
    }
    PROMOTER.get().closing.store(true, Ordering::Release);
    wait_for_promotions_until(Some(Instant::now() + Duration::from_secs(10)));
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
    let p = PROMOTER.get();
    if p.hooks
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < EXIT_HOOKS).then_some(n + 1))
        .is_ok()
    {
        // SAFETY: registers a plain function with no captured state; atexit has no other effect.
        unsafe { atexit(finish_background_work_at_exit) };
    }
}

/// Queues `key`'s optimized compile (starting the background thread on first use).
pub(super) fn promote(key: OpKey) {
    let p = PROMOTER.get();
    if p.hooks.load(Ordering::Acquire) == 0 {
        hook_exit();
    }
    *lock(&p.pending) += 1;
    let mut queue = lock(&p.queue);
    let sender = queue.get_or_insert_with(|| {
        let (tx, rx) = std::sync::mpsc::channel::<OpKey>();
        let spawned = std::thread::Builder::new().name("eager-optimize".into()).spawn(move || {
            for key in rx {
                let p = PROMOTER.get();
                if !p.closing.load(Ordering::Acquire) {
                    let start = Instant::now();
                    let optimized = runtime(key.device.kind).ok().and_then(|rt| {
                        let program = Program::of(&rt, &key, Tier::Optimized).ok()?;
                        *lock(&p.running) = Some(program.info.clone());
                        let exe = program.load(&rt).or_else(|| program.compile(&rt).ok());
                        *lock(&p.running) = None;
                        Some(program.finish(exe?))
                    });
                    cache().promote(&key, optimized, start.elapsed().as_nanos() as u64);
                    hook_exit();
                }
                let mut pending = lock(&p.pending);
                *pending -= 1;
                if *pending == 0 {
                    p.idle.notify_all();
                }
            }
        });
        // Without a thread the sends fail: keys stay quick (`promoting` keeps them from retrying).
        drop(spawned);
        tx
    });
    if sender.send(key).is_err() {
        *lock(&p.pending) -= 1;
    }
}

/// Waits until every hot key's optimized compile queued so far is swapped in (benchmarks and
/// tests that want steady figures).
pub fn wait_for_promotions() {
    wait_for_promotions_until(None);
}

/// Waits until no optimized compile is queued or running, or until `deadline`.
fn wait_for_promotions_until(deadline: Option<Instant>) {
    let p = PROMOTER.get();
    let mut pending = lock(&p.pending);
    while *pending > 0 {
        pending = match deadline {
            None => p.idle.wait(pending).unwrap_or_else(std::sync::PoisonError::into_inner),
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return;
                }
                p.idle.wait_timeout(pending, left).unwrap_or_else(std::sync::PoisonError::into_inner).0
            }
        };
    }
}
