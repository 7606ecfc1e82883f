//! How a dispatched op's results come to be ready (dispatch is asynchronous): the
//! [`Completion`] its completion event fills in (when, or why it failed), the device-side index
//! checks a read resolves, the failure a read reports (walked back to the first op that
//! failed, out of memory named as such), and [`synchronize`]. It launches nothing.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use super::Arg;
use crate::error::{Error, Result};
use crate::ops::IndexCheck;
use crate::pjrt;
use crate::profiler::{profiler, OpInfo};
use crate::shared::lock;

/// How a tensor's buffer came to be ready, filled in by the completion of the op that makes
/// it (dispatch is asynchronous): when it was ready and, if its op failed, why.
#[derive(Default)]
pub(crate) struct Completion {
    /// Profiler-clock time the buffer was ready; 0 while pending.
    pub(super) ready_ns: AtomicU64,
    pub(super) failure: OnceLock<Arc<Failure>>,
    /// Device-side index checks this result depends on that no read has passed yet (its own
    /// op's and its inputs'): a read resolves them, and a bad index fails it.
    checks: Mutex<SmallVec<[Arc<PendingCheck>; 1]>>,
    /// Whether `checks` may be non-empty (dispatches skip its lock when not).
    has_checks: AtomicBool,
}

/// An op's [`IndexCheck`](IndexCheck) result on the device, read once when first
/// needed: not at dispatch, which would wait for the device.
pub(crate) struct PendingCheck {
    op: String,
    check: IndexCheck,
    flag: pjrt::Buffer,
    /// `None` once read and passed; the failure's message if an index was out of range.
    verdict: OnceLock<Option<String>>,
}

/// Pending checks one result carries before the oldest are resolved at dispatch (a loop that
/// never reads would otherwise collect them without bound).
const MAX_PENDING_CHECKS: usize = 16;

impl PendingCheck {
    /// Reads the flag (waiting for its op) unless already read; the message if it failed.
    fn resolve(&self) -> Option<&str> {
        self.verdict
            .get_or_init(|| {
                let mut bytes = [0u8; 16];
                // A failed op reports itself through its result's read, not here.
                self.flag.to_host(&mut bytes).ok()?;
                let position = i64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
                let index = i64::from_le_bytes(bytes[8..].try_into().expect("8 bytes"));
                (position >= 0).then(|| self.check.message(index))
            })
            .as_deref()
    }

    fn passed(&self) -> bool {
        matches!(self.verdict.get(), Some(None))
    }
}

/// An op that failed on the device, with its inputs' completions: a failure propagates to
/// every op that reads a failed result, and the read names the first op of the chain.
pub(crate) struct Failure {
    op: String,
    message: String,
    inputs: SmallVec<[Arc<Completion>; 3]>,
    /// PJRT's code (RESOURCE_EXHAUSTED reads as out of memory), the op, and when it was
    /// launched on the profiler's clock (its own results, booked after, did not fill the
    /// memory).
    code: i32,
    info: Arc<OpInfo>,
    launched_ns: u64,
}

impl Failure {
    pub(super) fn new(
        info: &Arc<OpInfo>,
        e: pjrt::PjrtError,
        inputs: SmallVec<[Arc<Completion>; 3]>,
        launched_ns: u64,
    ) -> Arc<Failure> {
        let (op, message, code, info) = (info.signature(), e.message, e.code, info.clone());
        Arc::new(Failure { op, message, inputs, code, info, launched_ns })
    }
}

impl Completion {
    /// A buffer that is ready now (an upload).
    pub(crate) fn ready() -> Arc<Completion> {
        let c = Completion::default();
        c.ready_ns.store(profiler().now_ns().max(1), Ordering::Relaxed);
        Arc::new(c)
    }

    fn is_done(&self) -> bool {
        self.ready_ns.load(Ordering::Acquire) != 0
    }

    /// Takes on the unpassed checks of `inputs` and the op's own (`own`: each check, the op
    /// it names and its flag).
    pub(super) fn inherit(&self, inputs: &[Arg], own: Vec<(IndexCheck, String, pjrt::Buffer)>) {
        let mut list: SmallVec<[Arc<PendingCheck>; 1]> = SmallVec::new();
        for a in inputs.iter().filter(|a| a.completion.has_checks.load(Ordering::Acquire)) {
            for c in lock(&a.completion.checks).iter() {
                if !c.passed() && !list.iter().any(|k| Arc::ptr_eq(k, c)) {
                    list.push(c.clone());
                }
            }
        }
        for (check, op, flag) in own {
            list.push(Arc::new(PendingCheck { op, check, flag, verdict: OnceLock::new() }));
        }
        if list.len() > MAX_PENDING_CHECKS {
            // Old ones are done by now: reading them costs a small copy, not a wait. A failed
            // one stays, to fail the read.
            let excess = list.len() - MAX_PENDING_CHECKS;
            let mut k = 0;
            list.retain(|c| {
                k += 1;
                k > excess || c.resolve().is_some()
            });
        }
        if !list.is_empty() {
            *lock(&self.checks) = list;
            self.has_checks.store(true, Ordering::Release);
        }
    }

    /// Resolves the pending index checks before `read` reads this result: the first that
    /// found a bad index fails the read, naming its op.
    pub(crate) fn verify(&self, read: &str) -> Result<()> {
        if !self.has_checks.load(Ordering::Acquire) {
            return Ok(());
        }
        let pending: SmallVec<[Arc<PendingCheck>; 1]> = lock(&self.checks).clone();
        for c in &pending {
            if let Some(message) = c.resolve() {
                let (op, message, read) = (c.op.clone(), message.to_string(), read.to_string());
                return Err(Error::DeviceFailure { op, message, read });
            }
        }
        lock(&self.checks).retain(|c| !c.passed());
        Ok(())
    }

    /// The error to report for a failed read or wait of the tensor `read`.
    pub(crate) fn read_error(&self, read: &str, err: pjrt::PjrtError) -> Error {
        // The read and the completion callbacks are woken by the same events, in no fixed
        // order: give each callback a moment.
        let deadline = Instant::now() + Duration::from_secs(1);
        let settle = |c: &Completion| {
            while !c.is_done() && Instant::now() < deadline {
                std::thread::yield_now();
            }
        };
        settle(self);
        let Some(mut failure) = self.failure.get().cloned() else {
            return Error::Pjrt { op: read.to_string(), source: err };
        };
        // Walk back to the first op of the chain that failed.
        while let Some(earlier) = failure.inputs.iter().find_map(|c| {
            settle(c);
            c.failure.get().cloned()
        }) {
            failure = earlier;
        }
        if out_of_memory(failure.code, &failure.message) {
            let info = &failure.info;
            // The launch on the ledger's clock (the failure holds it on the profiler's).
            let ago = profiler().now_ns().saturating_sub(failure.launched_ns);
            let launched = crate::memory::now_ns().saturating_sub(ago);
            let own = |t: &crate::memory::LiveTensor| t.op == info.name && t.made_ns >= launched;
            let cause = format!("{}; reported when reading the result of {read}", failure.message);
            return crate::memory::out_of_memory(
                failure.op.clone(),
                info.device,
                info.output.size_in_bytes() as u64,
                cause,
                &own,
            );
        }
        Error::DeviceFailure {
            op: failure.op.clone(),
            message: failure.message.clone(),
            read: read.to_string(),
        }
    }
}

/// Waits until every op dispatched so far has finished on its device (like
/// `torch.cuda.synchronize`). Errors are not reported here but by reads of the results.
pub fn synchronize() {
    crate::profiler::wait_for_ops();
}

/// Whether a PJRT failure is a device out of memory: RESOURCE_EXHAUSTED, or (the CPU plugin
/// failing an asynchronous launch with INTERNAL) XLA's allocator message.
pub(super) fn out_of_memory(code: i32, message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    pjrt::code_name(code) == "RESOURCE_EXHAUSTED"
        || m.contains("out of memory")
        || m.contains("resource_exhausted")
}
