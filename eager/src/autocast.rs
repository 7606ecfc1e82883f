//! Automatic mixed precision, as `torch.autocast`: inside [`autocast`]`(DType::BF16, ..)` (or
//! while an [`AutocastGuard`] lives, or session-wide with [`set_autocast`]) each op runs in
//! the dtype its list says, whatever its inputs' dtype:
//!
//! - **low-precision list** (the autocast dtype, f32 accumulation as ever): matmul, linear,
//!   conv1d/conv2d/conv_transpose2d, attention (`scaled_dot_product_attention`).
//! - **f32 list**: softmax, log_softmax, layer_norm, rms_norm, group_norm, batch_norm, the
//!   losses (cross_entropy, mse), exp, log, pow, sum, mean, cumsum.
//! - **promote list**: ops of several floating inputs (elementwise arithmetic, `where`,
//!   comparisons, `cat`) run in the widest of their dtypes.
//! - everything else runs in its input's dtype.
//!
//! Each op says which list it is on in its family file. The casts are ordinary ops with
//! gradients, so the gradient of an f32 parameter used by a bf16 matmul comes back f32. The
//! policy is applied where every op is dispatched ([`crate::tensor::dispatch`]), so it works
//! eagerly, in fused mode and inside [`crate::compile()`] (whose traces are keyed by the
//! autocast dtype). Backward passes and optimizer steps run with autocast off (gradients keep
//! the dtypes of the forward; updates keep each parameter's dtype), as torch recommends.
//!
//! The state is per thread (a stack of scopes) over a session-wide default, and lives in the
//! process-wide state so that every REPL cell's copy of the library sees it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread::ThreadId;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shared::{lock, Shared};

/// The scopes of every thread and the session-wide default.
#[derive(Default)]
pub(crate) struct AutocastState {
    /// Threads with open scopes: 0 (the usual case) skips the map.
    active: AtomicUsize,
    /// Per thread, its open scopes innermost last (`None`: autocast off in that scope).
    scopes: Mutex<HashMap<ThreadId, Vec<Option<DType>>>>,
    /// The session-wide dtype ([`set_autocast`]): 0 off, else a [`code`].
    default: AtomicU8,
}

static STATE: Shared<AutocastState> = Shared::new("eager::autocast::AutocastState", AutocastState::default);

fn code(d: Option<DType>) -> u8 {
    match d {
        Some(DType::F16) => 1,
        Some(DType::BF16) => 2,
        _ => 0,
    }
}

fn decode(c: u8) -> Option<DType> {
    match c {
        1 => Some(DType::F16),
        2 => Some(DType::BF16),
        _ => None,
    }
}

fn check(dtype: DType, op: &'static str) -> Result<()> {
    if matches!(dtype, DType::F16 | DType::BF16) {
        return Ok(());
    }
    Err(Error::dtype(op, format!("autocast runs in f16 or bf16, got {dtype}")))
}

/// The dtype ops on this thread autocast to now, if autocast is on.
pub fn autocast_dtype() -> Option<DType> {
    let s = STATE.get();
    if s.active.load(Ordering::Acquire) != 0 {
        if let Some(top) = lock(&s.scopes).get(&std::thread::current().id()).and_then(|v| v.last()) {
            return *top;
        }
    }
    decode(s.default.load(Ordering::Relaxed))
}

/// Turns autocast on for the whole session (every thread without a scope of its own) in
/// `dtype` (f16 or bf16), or off with `None`: the REPL's `:autocast bf16|f16|off`.
pub fn set_autocast(dtype: Option<DType>) -> Result<()> {
    if let Some(d) = dtype {
        check(d, "set_autocast")?;
    }
    STATE.get().default.store(code(dtype), Ordering::Relaxed);
    Ok(())
}

/// Runs `f` with autocast to `dtype` (f16 or bf16) on this thread, as
/// `with torch.autocast(device, dtype):`.
pub fn autocast<T>(dtype: DType, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let _guard = AutocastGuard::new(dtype)?;
    f()
}

/// While alive, autocast is on (or off) on this thread; scopes nest, the innermost wins.
#[must_use = "the scope ends when the guard is dropped"]
pub struct AutocastGuard {
    // Not Send: the scope belongs to the thread that opened it.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl AutocastGuard {
    /// Autocast to `dtype` (f16 or bf16) until dropped.
    pub fn new(dtype: DType) -> Result<AutocastGuard> {
        check(dtype, "autocast")?;
        Ok(AutocastGuard::enter(Some(dtype)))
    }

    /// Autocast off until dropped (`torch.autocast(enabled=False)`): backward passes,
    /// optimizer steps, code that needs its own dtypes.
    pub fn off() -> AutocastGuard {
        AutocastGuard::enter(None)
    }

    fn enter(dtype: Option<DType>) -> AutocastGuard {
        let s = STATE.get();
        let mut scopes = lock(&s.scopes);
        let stack = scopes.entry(std::thread::current().id()).or_default();
        if stack.is_empty() {
            s.active.fetch_add(1, Ordering::AcqRel);
        }
        stack.push(dtype);
        AutocastGuard { _not_send: std::marker::PhantomData }
    }
}

impl Drop for AutocastGuard {
    fn drop(&mut self) {
        let s = STATE.get();
        let mut scopes = lock(&s.scopes);
        let id = std::thread::current().id();
        if let Some(stack) = scopes.get_mut(&id) {
            stack.pop();
            if stack.is_empty() {
                scopes.remove(&id);
                s.active.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}
