//! Fetching ahead: a region (a backward pass, an optimizer step) runs once dry, its ops
//! recorded and never run, so that the executables they need are fetched (compiled or
//! loaded) several at once before the real run dispatches them one by one.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{start_recording, take_recording_if, Recording};
use crate::device::Device;
use crate::error::Result;
use crate::ops::ValueDef;
use crate::runtime;

/// When a region is worth fetching ahead ([`ahead`]): the first time it runs, and again
/// while executables were fetched since its last start (its own, or new shapes before it). A
/// loop's backward pass and optimizer step record dry twice, then never.
pub(crate) struct AheadMark(AtomicU64);

impl AheadMark {
    pub(crate) const fn new() -> AheadMark {
        AheadMark(AtomicU64::new(u64::MAX))
    }

    fn due(&self) -> bool {
        let now = crate::cache::cache().fetches();
        self.0.swap(now, Ordering::Relaxed) != now
    }
}

impl Default for AheadMark {
    fn default() -> Self {
        AheadMark::new()
    }
}

/// Before `f` runs for real: if `mark` says so, runs `f` once dry on `device` (its ops on
/// this thread recorded, never run, Var writes dropped) and fetches the executables of the
/// ops it recorded, several at once ([`runtime::fetch_ahead`]); then each of `f`'s
/// dispatches hits. `f` must be an ordinary eager region (a backward pass, an optimizer
/// step) whose effects are its Var writes: what else it does happens twice. Inside a trace or
/// a fused region, in fused mode, or while another thread records, nothing is done (those
/// record anyway); `EAGER_FETCH_AHEAD=0` turns it off. Returns how many executables were
/// fetched.
pub(crate) fn ahead(mark: &AheadMark, device: Device, f: impl FnOnce() -> Result<()>) -> usize {
    // In fused mode the real run records too: one-op executables would go unused.
    if !mark.due() || super::fused_mode() || std::env::var_os("EAGER_FETCH_AHEAD").is_some_and(|v| v == "0") {
        return 0;
    }
    let Ok(rt) = runtime::runtime(device.kind) else { return 0 };
    if !start_recording(Recording { dry: true, ..Recording::new(device, rt, true) }) {
        return 0;
    }
    // Takes the dry recording out however `f` ends (a panic included: ops after it must run).
    struct Dry;
    impl Drop for Dry {
        fn drop(&mut self) {
            let this = std::thread::current().id();
            take_recording_if(|r| r.thread == this && r.dry);
        }
    }
    let dry = Dry;
    // A failure (a read of a value the dry run never made) ends the recording early: the
    // keys recorded until then are still fetched.
    let _ = f();
    let this = std::thread::current().id();
    let Some(rec) = take_recording_if(|r| r.thread == this && r.dry) else { return 0 };
    drop(dry);
    let keys = rec.values.iter().filter_map(|(def, _)| match def {
        ValueDef::Op { op, inputs } => {
            Some(crate::cache::OpKey::new(op.clone(), inputs.iter().map(|&v| &rec.values[v].1), device))
        }
        ValueDef::Param(_) => None,
    });
    runtime::fetch_ahead(keys.collect::<Vec<_>>())
}
