//! A tensor's autograd state, and what dispatch consults to record it: the [`Node`] a result
//! keeps (its op and inputs), the [`GradState`] of a tensor, the `no_grad` scopes, and the
//! accessors (`requires_grad`, `grad`, …). They are the tensor layer's because every dispatch
//! (and every op a trace records) asks them; the backward pass that walks the nodes is
//! `autograd`'s, above.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use smallvec::SmallVec;

use super::Tensor;
use crate::error::{Error, Result};
use crate::ops::Op;
use crate::shared::{lock, Shared};

/// How a tensor was computed, kept while gradients may flow through it.
pub(crate) struct Node {
    pub(crate) op: Op,
    /// The op's inputs, held until a backward pass through the node frees them, as torch
    /// frees a graph's saved tensors: `None` once freed. An input whose value the gradient
    /// rule does not read is kept without it (its place in the graph, shape and dtype).
    inputs: Mutex<Option<SmallVec<[Tensor; 3]>>>,
    /// The output's value, where the rule reads it (exp, tanh, …): set as the result is made.
    output: Mutex<Option<Tensor>>,
}

impl Node {
    /// The op's inputs, or `None` where a backward pass freed them.
    pub(crate) fn inputs(&self) -> Option<SmallVec<[Tensor; 3]>> {
        lock(&self.inputs).clone()
    }

    /// The output's value, if the rule reads it and no backward pass freed it.
    pub(crate) fn saved_output(&self) -> Option<Tensor> {
        lock(&self.output).clone()
    }

    /// Lets go of the inputs and output (the activations a training step's loss would keep
    /// alive).
    pub(crate) fn free(&self) {
        lock(&self.inputs).take();
        lock(&self.output).take();
    }
}

/// The autograd fields of a tensor.
#[derive(Default)]
pub(crate) struct GradState {
    /// Set on leaves the user asked gradients for.
    pub(crate) requires_grad: AtomicBool,
    /// Set on results of recorded ops.
    pub(crate) node: Option<Box<Node>>,
    /// The accumulated gradient (leaves only).
    pub(crate) grad: Mutex<Option<Tensor>>,
}

/// Threads inside a `no_grad` scope (with their nesting depth), in the process-wide state so
/// that every copy of the library (one per REPL cell) sees the same scopes.
#[derive(Default)]
pub(crate) struct GradMode {
    /// Number of threads in a scope: 0 (the usual case) skips the map.
    active: AtomicUsize,
    depth: Mutex<HashMap<ThreadId, usize>>,
}

impl GradMode {
    pub(crate) fn enabled(&self) -> bool {
        if self.active.load(Ordering::Acquire) == 0 {
            return true;
        }
        let depth = lock(&self.depth);
        !depth.contains_key(&std::thread::current().id())
    }

    fn enter(&self) {
        let mut depth = lock(&self.depth);
        let d = depth.entry(std::thread::current().id()).or_insert(0);
        if *d == 0 {
            self.active.fetch_add(1, Ordering::AcqRel);
        }
        *d += 1;
    }

    fn exit(&self) {
        let mut depth = lock(&self.depth);
        let id = std::thread::current().id();
        if let Some(d) = depth.get_mut(&id) {
            *d -= 1;
            if *d == 0 {
                depth.remove(&id);
                self.active.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

static GRAD_MODE: Shared<GradMode> = Shared::new("eager::tensor::GradMode", GradMode::default);

/// The scopes of the process (one per session, see [`crate::shared`]).
fn grad_mode() -> &'static GradMode {
    GRAD_MODE.get()
}

/// While alive, ops on this thread record no graph (like `torch.no_grad()`): for inference,
/// optimizer updates and evaluation.
#[must_use = "the scope ends when the guard is dropped"]
pub struct NoGradGuard {
    // Not Send: the scope belongs to the thread that opened it.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl NoGradGuard {
    /// Opens a scope without gradient recording; it ends when the guard drops.
    pub fn new() -> NoGradGuard {
        grad_mode().enter();
        NoGradGuard { _not_send: std::marker::PhantomData }
    }
}

impl Default for NoGradGuard {
    fn default() -> Self {
        NoGradGuard::new()
    }
}

impl Drop for NoGradGuard {
    fn drop(&mut self) {
        grad_mode().exit();
    }
}

/// Runs `f` with gradient recording off on this thread.
pub fn no_grad<T>(f: impl FnOnce() -> T) -> T {
    let _guard = NoGradGuard::new();
    f()
}

/// Whether ops on this thread record gradients now.
pub fn is_grad_enabled() -> bool {
    grad_mode().enabled()
}

/// The node to record on the result of `op` on `inputs`, if gradients flow through it.
pub(crate) fn record(op: &Op, inputs: &[&Tensor]) -> Option<Box<Node>> {
    if !inputs.iter().any(|t| t.tracks_grad()) || !is_grad_enabled() {
        return None;
    }
    let reads = op.grad_reads();
    let inputs = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| if reads.input(i) { (*t).clone() } else { t.without_value() })
        .collect();
    Some(Box::new(Node { op: op.clone(), inputs: Mutex::new(Some(inputs)), output: Mutex::new(None) }))
}

/// What `grad_state` reads for a tensor without autograd state: one empty state for all.
static NO_GRAD_STATE: std::sync::OnceLock<GradState> = std::sync::OnceLock::new();

impl Tensor {
    /// This tensor with the result's autograd node (if any) attached. Bool and integer
    /// results get none, as in torch: no gradient flows through them.
    pub(crate) fn with_node(mut self, node: Option<Box<Node>>) -> Tensor {
        if let Some(node) = node.filter(|_| self.dtype().is_float()) {
            if node.op.grad_reads().output {
                // The value alone: the node holding this tensor's autograd state would be a cycle.
                *lock(&node.output) = Some(self.detach());
            }
            self.autograd = Some(Arc::new(GradState { node: Some(node), ..Default::default() }));
        }
        self
    }

    pub(crate) fn grad_state(&self) -> &GradState {
        match &self.autograd {
            Some(s) => s,
            None => NO_GRAD_STATE.get_or_init(GradState::default),
        }
    }

    /// With a fresh autograd state (for `set_requires_grad` on a tensor that had none).
    pub(crate) fn with_fresh_grad_state(&self) -> Tensor {
        Tensor { inner: self.inner.clone(), autograd: Some(Arc::new(GradState::default())) }
    }

    pub(crate) fn has_grad_state(&self) -> bool {
        self.autograd.is_some()
    }
}

impl Tensor {
    /// Whether gradients flow through this tensor: a leaf that requires them, or the result
    /// of a recorded op.
    pub fn tracks_grad(&self) -> bool {
        let s = self.grad_state();
        s.node.is_some() || s.requires_grad.load(Ordering::Relaxed)
    }

    /// Whether this is a leaf the user asked gradients for.
    pub fn requires_grad(&self) -> bool {
        self.grad_state().requires_grad.load(Ordering::Relaxed)
    }

    /// Asks for (or stops) gradients of this tensor: after `loss.backward()`, `.grad()` holds
    /// d loss / d self. Only floating-point tensors have gradients. Use the tensor it returns
    /// (it shares the data; a tensor that never tracked gradients gets new autograd state):
    /// `let w = Tensor::randn(&[3, 2], DType::F32)?.set_requires_grad(true)?;`.
    pub fn set_requires_grad(&self, on: bool) -> Result<Tensor> {
        if on && !self.dtype().is_float() {
            return Err(Error::dtype(
                "requires_grad",
                format!("only floating-point tensors have gradients, this one is {}", self.dtype()),
            ));
        }
        if !self.has_grad_state() {
            if !on {
                return Ok(self.clone());
            }
            let t = self.with_fresh_grad_state();
            t.grad_state().requires_grad.store(true, Ordering::Relaxed);
            return Ok(t);
        }
        self.grad_state().requires_grad.store(on, Ordering::Relaxed);
        Ok(self.clone())
    }

    /// The gradient accumulated by `backward()` calls (leaves only), if any.
    pub fn grad(&self) -> Option<Tensor> {
        lock(&self.grad_state().grad).clone()
    }

    /// Forgets the accumulated gradient.
    pub fn zero_grad(&self) {
        *lock(&self.grad_state().grad) = None;
    }

    /// Replaces the accumulated gradient of a leaf that requires one (a no-op on others).
    pub(crate) fn set_grad(&self, grad: Option<Tensor>) {
        if self.requires_grad() {
            *lock(&self.grad_state().grad) = grad;
        }
    }

    pub(crate) fn node(&self) -> Option<&Node> {
        self.grad_state().node.as_deref()
    }
}
