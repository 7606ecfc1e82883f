//! Process-wide state, one per process even when this library is loaded more than once.
//!
//! Each layer owns its state through a [`Shared`] static (the runtimes in `runtime`, the
//! compile cache in `cache`, grad mode in `tensor`, …). evcxr compiles every REPL cell into
//! its own shared object with its own copy of eager's statics; a host binary that exports the
//! symbol [`SLOT_SYMBOL`] (an `AtomicPtr`, see the repl crate) lets every copy find the state
//! the first copy made: one PJRT client, one compile cache, one profiler log per session.
//! Without the symbol (ordinary programs) each `Shared` is an ordinary lazy static.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The symbol a host binary exports (`static EAGER_SESSION_SLOT: AtomicPtr<c_void>`).
pub const SLOT_SYMBOL: &str = "EAGER_SESSION_SLOT";

/// Locks `m`, taking the value of a poisoned lock as it is: state here stays consistent
/// between statements, and a panicking REPL cell must not wedge the session.
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A lazily made value shared by every copy of this library in the process.
///
/// `name` identifies it in the session's registry: it must be unique and name a type that
/// does not change while the build fingerprint stays the same (`"<crate>::<module>::<what>"`).
pub struct Shared<T: 'static> {
    name: &'static str,
    make: fn() -> T,
    local: OnceLock<&'static T>,
}

impl<T: Send + Sync + 'static> Shared<T> {
    /// A process-wide value named `name`, made by `make` on first use.
    pub const fn new(name: &'static str, make: fn() -> T) -> Shared<T> {
        Shared { name, make, local: OnceLock::new() }
    }

    /// The value: this copy's cached pointer after the first call.
    #[inline]
    pub fn get(&self) -> &'static T {
        self.local.get_or_init(|| self.find_or_make())
    }

    #[cold]
    fn find_or_make(&self) -> &'static T {
        let Some(registry) = registry() else {
            return Box::leak(Box::new((self.make)()));
        };
        // Made outside the registry's lock: a value's `make` may reach other `Shared`s.
        if let Some(&addr) = lock(registry).get(self.name) {
            // SAFETY: entries under this name were leaked as `T` by a copy built from the same
            // source (the slot's fingerprint matched) and live as long as the process.
            return unsafe { &*(addr as *const T) };
        }
        let made: &'static T = Box::leak(Box::new((self.make)()));
        let addr = *lock(registry).entry(self.name.to_string()).or_insert(made as *const T as usize);
        // SAFETY: as above; `or_insert` kept either ours or another copy's `T`.
        unsafe { &*(addr as *const T) }
    }
}

/// The registry every `Shared` of this build lives in: names to leaked values' addresses.
type Registry = Mutex<HashMap<String, usize>>;

/// What the host's slot points to. `repr(C)` and a build fingerprint: a copy built from other
/// source (eager edited mid-session) must not read another copy's values.
#[repr(C)]
struct SlotRecord {
    magic: u64,
    build_id: *const u8,
    build_id_len: usize,
    registry: *const Registry,
}

const MAGIC: u64 = 0xEA6E_5E55_0000_0002;
const BUILD_ID: &str = env!("EAGER_BUILD_ID");

/// The session's registry when a host offers a slot (published there by the first copy),
/// else `None`. Looked up once per copy.
fn registry() -> Option<&'static Registry> {
    static REGISTRY: OnceLock<Option<&'static Registry>> = OnceLock::new();
    *REGISTRY.get_or_init(|| {
        let slot = find_slot()?;
        if let Some(r) = read_slot(slot) {
            return Some(r);
        }
        if !slot.load(Ordering::Acquire).is_null() {
            eprintln!("eager: this cell's eager was built from other source than the session's; it gets a runtime of its own (restart the session to share one again)");
            return None;
        }
        let registry: &'static Registry = Box::leak(Box::new(Mutex::new(HashMap::new())));
        let record = SlotRecord { magic: MAGIC, build_id: BUILD_ID.as_ptr(), build_id_len: BUILD_ID.len(), registry };
        let rec = Box::into_raw(Box::new(record));
        match slot.compare_exchange(std::ptr::null_mut(), rec as *mut c_void, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Some(registry),
            Err(_) => {
                // Another copy won the race; use its registry.
                // SAFETY: `rec` was never published.
                drop(unsafe { Box::from_raw(rec) });
                read_slot(slot)
            }
        }
    })
}

/// Whether this process has a session slot that this copy shares (a REPL cell's process).
pub fn in_session() -> bool {
    registry().is_some()
}

fn find_slot() -> Option<&'static AtomicPtr<c_void>> {
    let this = libloading::os::unix::Library::this();
    // SAFETY: a host exports this symbol only as `static AtomicPtr<c_void>`.
    let sym = unsafe { this.get::<*mut AtomicPtr<c_void>>(b"EAGER_SESSION_SLOT\0") }.ok()?;
    let p: *mut AtomicPtr<c_void> = *sym;
    // SAFETY: the host's static lives as long as the process.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// The registry a copy of this code published in `slot`, if any and of this build.
fn read_slot(slot: &AtomicPtr<c_void>) -> Option<&'static Registry> {
    let rec = slot.load(Ordering::Acquire) as *const SlotRecord;
    if rec.is_null() {
        return None;
    }
    // SAFETY: records are leaked once published and come from a copy of this code; the
    // magic and fingerprint are checked before the registry pointer is used.
    let rec = unsafe { &*rec };
    // SAFETY: as above: the fingerprint is a leaked `&'static str` of the publishing copy.
    let id = unsafe { std::slice::from_raw_parts(rec.build_id, rec.build_id_len) };
    // SAFETY: as above.
    (rec.magic == MAGIC && id == BUILD_ID.as_bytes()).then(|| unsafe { &*rec.registry })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    static MADE: AtomicUsize = AtomicUsize::new(0);
    static COUNTER: Shared<AtomicUsize> = Shared::new("eager::shared::tests::counter", || {
        MADE.fetch_add(1, Ordering::SeqCst);
        AtomicUsize::new(7)
    });

    #[test]
    fn a_shared_value_is_made_once_and_kept() {
        let a = COUNTER.get();
        a.fetch_add(1, Ordering::SeqCst);
        assert_eq!(COUNTER.get().load(Ordering::SeqCst), 8);
        assert!(std::ptr::eq(a, COUNTER.get()));
        assert_eq!(MADE.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_poisoned_lock_still_opens() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock().unwrap();
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        *lock(&m) += 1;
        assert_eq!(*lock(&m), 2);
    }
}
