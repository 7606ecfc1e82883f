//! [`Var`]: a named, mutable slot holding a tensor — model parameters and optimizer state.
//! Tensors themselves never change; a training step computes new ones and sets the slots.
//! Inside a compiled function, reading a Var becomes an input of the compiled program and
//! setting it an output, so the same step code runs eager or compiled.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::shared::lock;
use crate::tensor::trace::VarSlot;
use crate::tensor::Tensor;

/// A named, shared, mutable tensor slot. Cloning shares the slot.
#[derive(Clone)]
pub struct Var {
    inner: Arc<VarInner>,
}

struct VarInner {
    name: String,
    /// Parameters are leaves that require gradients.
    parameter: bool,
    /// A parameter frozen with [`Var::set_requires_grad`]`(false)`: its value is a leaf that
    /// takes no gradient (none is computed or kept) and optimizers skip it.
    frozen: AtomicBool,
    /// The value is stored transposed (`store_transposed`): a 2-D weight kept `[in, out]`.
    transposed: AtomicBool,
    value: Mutex<Tensor>,
    /// What a layer attached to this weight (a LoRA adapter: `nn::apply_lora`), typed by the
    /// layer that reads it.
    adapter: Mutex<Option<Arc<dyn std::any::Any + Send + Sync>>>,
}

impl Var {
    /// A slot for state that takes no gradient (optimizer moments, step counters, buffers).
    pub fn new(name: impl Into<String>, value: Tensor) -> Var {
        Var {
            inner: Arc::new(VarInner {
                name: name.into(),
                parameter: false,
                frozen: AtomicBool::new(false),
                transposed: AtomicBool::new(false),
                value: Mutex::new(value.detach()),
                adapter: Mutex::new(None),
            }),
        }
    }

    /// A trainable parameter: its value is a leaf that requires gradients.
    pub fn parameter(name: impl Into<String>, value: Tensor) -> Result<Var> {
        let leaf = value.detach().set_requires_grad(true)?;
        let (frozen, transposed) = (AtomicBool::new(false), AtomicBool::new(false));
        let (value, adapter) = (Mutex::new(leaf), Mutex::new(None));
        let inner = VarInner { name: name.into(), parameter: true, frozen, transposed, value, adapter };
        Ok(Var { inner: Arc::new(inner) })
    }

    /// Freezes (`false`) or unfreezes a parameter, as torch's `p.requires_grad_(False)`: a
    /// frozen parameter's value takes no gradient (backward computes and keeps none for it,
    /// and its accumulated gradient is dropped) and optimizers skip it. An error for a Var
    /// that is no parameter (state and buffers never take gradients).
    pub fn set_requires_grad(&self, on: bool) -> Result<()> {
        if !self.inner.parameter {
            let msg =
                format!("{} is not a parameter (made with Var::new): it takes no gradient", self.name());
            return Err(crate::error::Error::invalid("Var::set_requires_grad", msg));
        }
        self.inner.frozen.store(!on, Ordering::Relaxed);
        let value = self.current();
        value.zero_grad();
        self.set_current(value.detach().set_requires_grad(on)?);
        Ok(())
    }

    /// Whether this is a parameter that takes gradients now (not frozen).
    pub fn requires_grad(&self) -> bool {
        self.inner.parameter && !self.inner.frozen.load(Ordering::Relaxed)
    }

    /// The variable's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Whether it is a parameter (takes gradients unless frozen).
    pub fn is_parameter(&self) -> bool {
        self.inner.parameter
    }

    /// The current value (inside a compiled function: the value traced for this call).
    pub fn get(&self) -> Tensor {
        if let Some(t) = crate::tensor::trace::read_var(self) {
            return t;
        }
        self.current()
    }

    /// The value in the slot, whatever is being traced.
    pub(crate) fn current(&self) -> Tensor {
        lock(&self.inner.value).clone()
    }

    /// Stores a 2-D value transposed, for inference: a Linear weight `[out, in]` kept as
    /// `[in, out]`, so that its product with a few rows is the CPU backend's plain row-major
    /// GEMM rather than a transposed one (measured 3.1x faster for 8 rows of a 768x2048
    /// weight). [`Var::get`] then returns the stored `[in, out]` tensor and `nn::Linear` reads
    /// it as such; [`Var::set`] is refused. Only for a Var that takes no gradient (frozen
    /// first): serving a model that nothing trains.
    pub fn store_transposed(&self) -> Result<()> {
        if self.is_stored_transposed() {
            return Ok(());
        }
        let value = self.current();
        if self.requires_grad() || value.rank() != 2 {
            let msg = format!(
                "{} ({}) must be 2-D and take no gradient (set_requires_grad(false) first)",
                self.name(),
                value.spec()
            );
            return Err(crate::error::Error::invalid("Var::store_transposed", msg));
        }
        let stored = value.permute(&[1, 0])?.detach();
        self.set_current(stored);
        self.inner.transposed.store(true, Ordering::Release);
        Ok(())
    }

    /// Whether `self` and `other` are the same slot (a tied weight is one slot in two layers).
    pub fn ptr_eq(&self, other: &Var) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Whether the value is stored transposed ([`Var::store_transposed`]).
    pub fn is_stored_transposed(&self) -> bool {
        self.inner.transposed.load(Ordering::Acquire)
    }

    /// Replaces the value (same shape and dtype expected by compiled functions that read it;
    /// they retrace otherwise). A parameter's new value is a fresh leaf that keeps the
    /// accumulated gradient, as an in-place update in torch does.
    pub fn set(&self, value: Tensor) -> Result<()> {
        if self.is_stored_transposed() {
            let msg = format!("{} is stored transposed for inference (Var::store_transposed)", self.name());
            return Err(crate::error::Error::invalid("Var::set", msg));
        }
        let value = if self.requires_grad() {
            let grad = self.get().grad();
            let leaf = value.detach().set_requires_grad(true)?;
            if let Some(g) = grad {
                *lock(&leaf.grad_state().grad) = Some(g);
            }
            leaf
        } else {
            value.detach()
        };
        if crate::tensor::trace::write_var(self, &value)? {
            return Ok(());
        }
        self.set_current(value);
        Ok(())
    }

    pub(crate) fn set_current(&self, value: Tensor) {
        *lock(&self.inner.value) = value;
    }

    /// The gradient accumulated into the current value, if any.
    pub fn grad(&self) -> Option<Tensor> {
        self.get().grad()
    }

    /// Drops the gradient accumulated into the current value.
    pub fn zero_grad(&self) {
        self.get().zero_grad()
    }

    /// Replaces the accumulated gradient (torch's `p.grad = g`): what gradient clipping and
    /// loss scaling write back. It must have the value's shape and dtype.
    pub fn set_grad(&self, grad: Option<Tensor>) -> Result<()> {
        let value = self.get();
        if let Some(g) = &grad {
            if !self.requires_grad() || g.spec() != value.spec() {
                let msg = format!(
                    "{} ({}{}) cannot take a gradient {}",
                    self.name(),
                    value.spec(),
                    if self.requires_grad() { "" } else { ", takes no gradient" },
                    g.spec()
                );
                return Err(crate::error::Error::invalid("Var::set_grad", msg));
            }
        }
        value.set_grad(grad.map(|g| g.detach()));
        Ok(())
    }

    /// What a layer attached to this Var, if it is a `T`.
    pub(crate) fn adapter<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        lock(&self.inner.adapter).clone()?.downcast::<T>().ok()
    }

    /// Attaches `adapter` to this Var (`None` takes it off).
    pub(crate) fn set_adapter(&self, adapter: Option<Arc<dyn std::any::Any + Send + Sync>>) {
        *lock(&self.inner.adapter) = adapter;
    }

    /// Identity of the slot.
    pub(crate) fn id(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }
}

// How a trace (the tensor layer's recording, below) reads, names and writes back a Var.
impl VarSlot for Var {
    fn id(&self) -> usize {
        Var::id(self)
    }
    fn name(&self) -> &str {
        Var::name(self)
    }
    fn current(&self) -> Tensor {
        Var::current(self)
    }
    fn requires_grad(&self) -> bool {
        Var::requires_grad(self)
    }
    fn set(&self, value: Tensor) -> Result<()> {
        Var::set(self, value)
    }
}

impl std::fmt::Debug for Var {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.current();
        write!(
            f,
            "Var({}: {} on {}{})",
            self.name(),
            v.spec(),
            v.device(),
            match (self.inner.parameter, self.requires_grad()) {
                (true, true) => ", parameter",
                (true, false) => ", parameter, frozen",
                _ => "",
            }
        )
    }
}
