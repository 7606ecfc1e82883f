//! Reverse-mode automatic differentiation over the eager ops. A dispatch whose inputs track
//! gradients records a `Node` (the op and its inputs) on its result; [`Tensor::backward`]
//! walks those nodes from a scalar back to the leaves, applying each op's gradient rule
//! (`Op::backward`, defined beside the op in `ops.rs`). The rules are ordinary tensor ops,
//! so gradients run through the same single-op compile cache (and are profiled the same way).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread::ThreadId;

use smallvec::SmallVec;

use crate::error::{Error, Result};
use crate::ops::Op;
use crate::shared::{lock, Shared};
use crate::tensor::Tensor;

/// How a tensor was computed, kept while gradients may flow through it.
pub(crate) struct Node {
    pub(crate) op: Op,
    pub(crate) inputs: SmallVec<[Tensor; 3]>,
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
    /// When backward passes fetch their rules' executables ahead.
    ahead: crate::compile::AheadMark,
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

static GRAD_MODE: Shared<GradMode> = Shared::new("eager::autograd::GradMode", GradMode::default);

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
    Some(Box::new(Node { op: op.clone(), inputs: inputs.iter().map(|t| (*t).clone()).collect() }))
}

/// Identity of a tensor in one backward pass.
fn key(t: &Tensor) -> usize {
    t.identity()
}

/// Every tensor `root` depends on through recorded nodes, inputs before the tensors made
/// from them.
fn topological_order(root: &Tensor) -> Vec<Tensor> {
    let mut order = Vec::new();
    let mut seen = std::collections::HashSet::new();
    // Iterative DFS (graphs of long training loops are deep): (tensor, children pushed?).
    let mut stack = vec![(root.clone(), false)];
    while let Some((t, expanded)) = stack.pop() {
        if expanded {
            order.push(t);
            continue;
        }
        if !seen.insert(key(&t)) {
            continue;
        }
        stack.push((t.clone(), true));
        if let Some(node) = t.node() {
            for i in node.inputs.iter().filter(|i| i.tracks_grad()) {
                if !seen.contains(&key(i)) {
                    stack.push((i.clone(), false));
                }
            }
        }
    }
    order
}

/// Adds `g` into `slot` (gradients accumulate, as in torch).
fn accumulate(slot: &mut Option<Tensor>, g: Tensor) -> Result<()> {
    *slot = Some(match slot.take() {
        Some(prev) => prev.add(&g)?,
        None => g,
    });
    Ok(())
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

    /// Computes the gradient of this scalar with respect to every leaf that requires one and
    /// adds it to the leaf's `.grad()`.
    pub fn backward(&self) -> Result<()> {
        if self.numel() != 1 {
            return Err(Error::shape(
                "backward",
                format!(
                    "needs a scalar (one-element) tensor, got shape {:?}; reduce it first, e.g. .sum_all()",
                    self.shape()
                ),
            ));
        }
        if !self.tracks_grad() {
            return Err(Error::invalid(
                "backward",
                "this tensor does not depend on any tensor that requires gradients (set one with .set_requires_grad(true), outside no_grad)",
            ));
        }
        let _no_grad = NoGradGuard::new();
        // Gradients keep the dtypes of the forward pass, as torch's backward under autocast.
        let _full_precision = crate::autocast::AutocastGuard::off();
        let order = topological_order(self);
        // On the default device the whole pass is one program (one executable, as torch's
        // autograd engine runs it in one call), its gradients given to the leaves as it ends.
        if crate::compile::ops_as_one() && self.shards().is_none() && self.device() == crate::default_device()
        {
            return crate::compile::fused_op("backward", || {
                self.gradients(&order, |leaf, g| accumulate(&mut lock(&leaf.grad_state().grad), g.clone()))
            });
        }
        // Elsewhere, new shapes came before (the first step of a loop): the rules' keys are
        // fetched at once, their compiles side by side, before the rules run one after
        // another. Leaves are not written in the dry run.
        if self.shards().is_none() {
            crate::compile::ahead(&grad_mode().ahead, self.device(), || {
                self.gradients(&order, |leaf, g| {
                    if let Some(prev) = leaf.grad() {
                        prev.add(g)?;
                    }
                    Ok(())
                })
            });
        }
        self.gradients(&order, |leaf, g| accumulate(&mut lock(&leaf.grad_state().grad), g.clone()))
    }

    /// Runs the gradient rules from this root back through `order` (its topological order),
    /// handing each leaf that requires a gradient its gradient.
    fn gradients(
        &self,
        order: &[Tensor],
        mut leaf: impl FnMut(&Tensor, &Tensor) -> Result<()>,
    ) -> Result<()> {
        let mut grads: HashMap<usize, Tensor> = HashMap::new();
        grads.insert(key(self), self.ones_like()?);
        for t in order.iter().rev() {
            let Some(g) = grads.remove(&key(t)) else { continue };
            if t.requires_grad() {
                leaf(t, &g)?;
            }
            let Some(node) = t.node() else { continue };
            let inputs: SmallVec<[&Tensor; 3]> = node.inputs.iter().collect();
            let input_grads = node.op.backward(&inputs, t, &g)?;
            for (input, ig) in node.inputs.iter().zip(input_grads) {
                let Some(ig) = ig else { continue };
                if !input.tracks_grad() {
                    continue;
                }
                debug_assert_eq!(ig.shape(), input.shape(), "{}: gradient shape", node.op.name());
                let mut slot = grads.remove(&key(input));
                accumulate(&mut slot, ig)?;
                grads.insert(key(input), slot.expect("just accumulated"));
            }
        }
        Ok(())
    }
}
