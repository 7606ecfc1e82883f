//! Reverse-mode automatic differentiation over the eager ops. A dispatch whose inputs track
//! gradients records a `Node` (the op and its inputs) on its result; [`Tensor::backward`]
//! walks those nodes from a scalar back to the leaves, applying each op's gradient rule
//! (`Op::backward`, defined beside the op in `ops.rs`). The rules are ordinary tensor ops,
//! so gradients run through the same single-op compile cache (and are profiled the same way).
//!
//! The nodes, a tensor's gradient state and the [`no_grad`] scopes are the tensor layer's
//! (`tensor/grad.rs`: every dispatch consults them); this module is the backward pass over
//! them, and keeps their public names.

use std::collections::HashMap;

use smallvec::SmallVec;

use crate::error::{Error, Result};
use crate::shared::{lock, Shared};
use crate::tensor::trace::{ahead, fused_op, ops_as_one, AheadMark};
use crate::tensor::Tensor;

pub use crate::tensor::grad::{is_grad_enabled, no_grad, NoGradGuard};

/// When backward passes fetch their rules' executables ahead (one mark per session).
static BACKWARD_AHEAD: Shared<AheadMark> = Shared::new("eager::autograd::BackwardAhead", AheadMark::new);

/// Identity of a tensor in one backward pass.
fn key(t: &Tensor) -> usize {
    t.identity()
}

/// Every tensor `root` depends on through recorded nodes, inputs before the tensors made
/// from them; an error where an earlier backward pass freed part of the graph.
fn topological_order(root: &Tensor) -> Result<Vec<Tensor>> {
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
            let Some(inputs) = node.inputs() else {
                return Err(Error::invalid(
                    "backward",
                    format!(
                        "this graph was freed by an earlier backward() (through {}), as torch frees it; to go through a graph more than once, call backward_retain_graph() before the last time",
                        node.op.name()
                    ),
                ));
            };
            for i in inputs.into_iter().filter(|i| i.tracks_grad()) {
                if !seen.contains(&key(&i)) {
                    stack.push((i, false));
                }
            }
        }
    }
    Ok(order)
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
    /// Computes the gradient of this scalar with respect to every leaf that requires one and
    /// adds it to the leaf's `.grad()`. Then the graph lets go of the values it kept for the
    /// gradient rules (the activations of a forward pass), as torch's `backward()` does: a
    /// second pass through it is an error; use [`Tensor::backward_retain_graph`] for that.
    pub fn backward(&self) -> Result<()> {
        let order = self.backward_pass()?;
        for t in &order {
            if let Some(node) = t.node() {
                node.free();
            }
        }
        Ok(())
    }

    /// [`Tensor::backward`], keeping the graph for another pass (torch's
    /// `backward(retain_graph=True)`): gradients of each pass add up.
    pub fn backward_retain_graph(&self) -> Result<()> {
        self.backward_pass().map(drop)
    }

    /// The backward pass; returns the graph it went through.
    fn backward_pass(&self) -> Result<Vec<Tensor>> {
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
        let order = topological_order(self)?;
        // On the default device the whole pass is one program (one executable, as torch's
        // autograd engine runs it in one call), its gradients given to the leaves as it ends.
        if ops_as_one() && self.shards().is_none() && self.device() == crate::default_device() {
            fused_op("backward", || {
                self.gradients(&order, |leaf, g| accumulate(&mut lock(&leaf.grad_state().grad), g.clone()))
            })?;
            return Ok(order);
        }
        // Elsewhere, new shapes came before (the first step of a loop): the rules' keys are
        // fetched at once, their compiles side by side, before the rules run one after
        // another. Leaves are not written in the dry run.
        if self.shards().is_none() {
            ahead(BACKWARD_AHEAD.get(), self.device(), || {
                self.gradients(&order, |leaf, g| {
                    if let Some(prev) = leaf.grad() {
                        prev.add(g)?;
                    }
                    Ok(())
                })
            });
        }
        self.gradients(&order, |leaf, g| accumulate(&mut lock(&leaf.grad_state().grad), g.clone()))?;
        Ok(order)
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
            let Some(held) = node.inputs() else { continue };
            let inputs: SmallVec<[&Tensor; 3]> = held.iter().collect();
            // `t` may be a consumer's valueless copy: a rule that reads the output has it saved.
            let saved = node.saved_output();
            let input_grads = node.op.backward(&inputs, saved.as_ref().unwrap_or(t), &g)?;
            for (input, ig) in held.iter().zip(input_grads) {
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
