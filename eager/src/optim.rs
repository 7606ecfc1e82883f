//! Optimizers (as torch.optim): they read each parameter's gradient and set its new value.
//! Their state (momentum, moments, step count) lives in [`Var`]s and is computed on the device,
//! so a step inside a compiled function reads and writes it like the parameters.
//!
//! Frozen parameters ([`Var::set_requires_grad`]`(false)`) are skipped: those frozen when an
//! optimizer is made get no state at all (LoRA's frozen base costs no moments), those frozen
//! later are left as they are.
//!
//! Mixed precision, two ways (as torch users do it):
//! - f32 parameters under [`autocast`](mod@crate::autocast): the parameters stay f32, autocast casts them
//!   for the ops of its low-precision list, and gradients come back f32 through the casts;
//!   nothing to do here (torch.amp's way, the recommended one).
//! - bf16/f16 parameters with [`Adam::with_master_weights`]: the optimizer keeps an f32
//!   master copy of each half-precision parameter (and f32 moments), updates the master from
//!   the gradient cast to f32, and sets the parameter to the master rounded once, so small
//!   updates accumulate instead of rounding away (what apex's O2 and JAX's `jmp` do).
//!
//! f16 gradients underflow without loss scaling: see [`GradScaler`] (torch.amp.GradScaler),
//! and [`clip_grad_norm_`] for clipping by the global norm.

mod clip;
mod scaler;

pub use clip::clip_grad_norm_;
pub use scaler::GradScaler;

use crate::autograd::no_grad;
use crate::compile::AheadMark;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::var::Var;

/// An optimizer: updates its parameters from their gradients.
pub trait Optimizer {
    /// Updates every parameter that has a gradient.
    fn step(&self) -> Result<()>;

    /// Forgets every parameter's gradient.
    fn zero_grad(&self);

    /// The parameters it updates (what [`GradScaler::unscale_`] and clipping go over).
    fn params(&self) -> &[Var];

    /// Its state, one Var per buffer (torch's `optimizer.state`): what a checkpoint saves
    /// besides the parameters, and what a compiled step overwrites in place with them.
    fn state(&self) -> Vec<Var> {
        Vec::new()
    }
}

/// The parameters that take gradients now (frozen ones get no optimizer state).
fn trainable(params: Vec<Var>) -> Vec<Var> {
    params.into_iter().filter(Var::requires_grad).collect()
}

/// Runs `update`, an optimizer's step over `params`, as one program named `name` (torch's
/// `foreach`/fused optimizers: all parameters in one executable, not ~10 dispatches each).
/// Parameters split over a mesh step op by op; the first steps of a loop then run it dry
/// first, so that its executables are fetched side by side (see `compile::ahead`). Autocast
/// is off inside: an update keeps each parameter's dtype.
fn step_with(
    name: &'static str,
    params: &[Var],
    mark: &AheadMark,
    update: impl Fn() -> Result<()>,
) -> Result<()> {
    let _full_precision = crate::autocast::AutocastGuard::off();
    // `current`, not `get`: reading a Var inside a compiled function would make it an input.
    // Not held across the update: a value still held elsewhere is never donated.
    let Some((local, device)) = params.first().map(|p| {
        let first = p.current();
        (first.shards().is_none(), first.device())
    }) else {
        return Ok(());
    };
    if crate::compile::ops_as_one() && local && device == crate::default_device() {
        return no_grad(|| crate::compile::fused_op(name, &update));
    }
    if local {
        crate::compile::ahead(mark, device, || no_grad(&update));
    }
    no_grad(update)
}

fn zero_state(p: &Var, what: &str) -> Result<Var> {
    Ok(Var::new(format!("{}.{what}", p.name()), p.get().zeros_like()?))
}

/// Stochastic gradient descent with optional momentum and weight decay (torch's `SGD`:
/// `v = μ v + g`, `p -= lr v`).
pub struct Sgd {
    params: Vec<Var>,
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor `μ` (0: none).
    pub momentum: f64,
    /// L2 penalty added to the gradient.
    pub weight_decay: f64,
    velocity: Vec<Option<Var>>,
    ahead: AheadMark,
}

impl Sgd {
    /// Plain SGD over `params` with learning rate `lr`.
    pub fn new(params: Vec<Var>, lr: f64) -> Sgd {
        Sgd::with_momentum(params, lr, 0.0).expect("no state to create")
    }

    /// SGD over `params` with learning rate `lr` and `momentum`.
    pub fn with_momentum(params: Vec<Var>, lr: f64, momentum: f64) -> Result<Sgd> {
        let params = trainable(params);
        let velocity = params
            .iter()
            .map(|p| if momentum != 0.0 { zero_state(p, "velocity").map(Some) } else { Ok(None) })
            .collect::<Result<_>>()?;
        Ok(Sgd { params, lr, momentum, weight_decay: 0.0, velocity, ahead: AheadMark::new() })
    }
}

impl Optimizer for Sgd {
    fn step(&self) -> Result<()> {
        step_with("sgd.step", &self.params, &self.ahead, || {
            for (p, v) in self.params.iter().zip(&self.velocity) {
                let Some(mut g) = p.grad().filter(|_| p.requires_grad()) else { continue };
                let value = p.get();
                if self.weight_decay != 0.0 {
                    g = g.add(&value.mul_scalar(self.weight_decay)?)?;
                }
                if let Some(v) = v {
                    g = v.get().mul_scalar(self.momentum)?.add(&g)?;
                    v.set(g.clone())?;
                }
                p.set(value.sub(&g.mul_scalar(self.lr)?)?)?;
            }
            Ok(())
        })
    }

    fn zero_grad(&self) {
        self.params.iter().for_each(Var::zero_grad);
    }

    fn params(&self) -> &[Var] {
        &self.params
    }

    /// The momentum buffers (`<name>.velocity`), none without momentum.
    fn state(&self) -> Vec<Var> {
        self.velocity.iter().flatten().cloned().collect()
    }
}

/// Adam, and AdamW with decoupled weight decay (torch's `Adam` / `AdamW`), bias-corrected.
pub struct Adam {
    params: Vec<Var>,
    /// Learning rate.
    pub lr: f64,
    /// Decay rates of the running averages of the gradient and its square.
    pub betas: (f64, f64),
    /// Added to the denominator for stability.
    pub eps: f64,
    /// Weight decay (added to the gradient for Adam, applied to the weights for AdamW).
    pub weight_decay: f64,
    /// AdamW: decay the weights directly instead of adding to the gradient.
    decoupled: bool,
    m: Vec<Var>,
    v: Vec<Var>,
    /// Steps taken, an f32 scalar on the device (so a compiled step counts too).
    t: Var,
    /// The f32 master copy of each f16/bf16 parameter, with master weights on.
    master: Vec<Option<Var>>,
    ahead: AheadMark,
}

impl Adam {
    /// Adam over `params` with learning rate `lr` and no weight decay.
    pub fn new(params: Vec<Var>, lr: f64) -> Result<Adam> {
        Adam::build(params, lr, 0.0, false)
    }

    /// AdamW with `weight_decay` (torch's default is 0.01).
    pub fn adamw(params: Vec<Var>, lr: f64, weight_decay: f64) -> Result<Adam> {
        Adam::build(params, lr, weight_decay, true)
    }

    fn build(params: Vec<Var>, lr: f64, weight_decay: f64, decoupled: bool) -> Result<Adam> {
        let params = trainable(params);
        let master = vec![None; params.len()];
        let m = params.iter().map(|p| zero_state(p, "exp_avg")).collect::<Result<_>>()?;
        let v = params.iter().map(|p| zero_state(p, "exp_avg_sq")).collect::<Result<_>>()?;
        let device = params.first().map(|p| p.get().device()).unwrap_or_else(crate::default_device);
        let t = Var::new("adam.step", Tensor::full_on(&[], 0.0, DType::F32, device)?);
        let ahead = AheadMark::new();
        let betas = (0.9, 0.999);
        Ok(Adam { params, lr, betas, eps: 1e-8, weight_decay, decoupled, m, v, t, master, ahead })
    }

    /// With f32 master weights: each f16/bf16 parameter gets an f32 copy (`<name>.master`)
    /// that the steps update (with f32 moments, from the gradient cast to f32); the parameter
    /// is set to it rounded once after each step. Other parameters are unchanged. A parameter
    /// set from outside afterwards (weights loaded) needs a new optimizer.
    pub fn with_master_weights(mut self) -> Result<Adam> {
        for (i, p) in self.params.iter().enumerate() {
            let value = p.current();
            if !matches!(value.dtype(), DType::F16 | DType::BF16) {
                continue;
            }
            let master = Var::new(format!("{}.master", p.name()), value.to_dtype(DType::F32)?);
            self.m[i] = Var::new(format!("{}.exp_avg", p.name()), master.current().zeros_like()?);
            self.v[i] = Var::new(format!("{}.exp_avg_sq", p.name()), master.current().zeros_like()?);
            self.master[i] = Some(master);
        }
        Ok(self)
    }

    /// The f32 master copy of parameter `i` (with master weights on and a half-precision
    /// parameter there).
    pub fn master_weight(&self, i: usize) -> Option<&Var> {
        self.master.get(i)?.as_ref()
    }

    /// Steps taken so far.
    pub fn steps(&self) -> Result<u64> {
        Ok(self.t.get().item::<f32>()? as u64)
    }
}

impl Optimizer for Adam {
    fn step(&self) -> Result<()> {
        let (b1, b2) = self.betas;
        if !(0.0..1.0).contains(&b1) || !(0.0..1.0).contains(&b2) {
            return Err(Error::invalid("adam", format!("betas must be in [0, 1), got ({b1}, {b2})")));
        }
        step_with("adam.step", &self.params, &self.ahead, || {
            let t = self.t.get().add_scalar(1.0)?;
            self.t.set(t.clone())?;
            for (((p, m), v), master) in self.params.iter().zip(&self.m).zip(&self.v).zip(&self.master) {
                let Some(mut g) = p.grad().filter(|_| p.requires_grad()) else { continue };
                let mut value = match master {
                    Some(w) => {
                        g = g.to_dtype(DType::F32)?;
                        w.get()
                    }
                    None => p.get(),
                };
                let dt = value.dtype();
                if self.weight_decay != 0.0 {
                    if self.decoupled {
                        value = value.mul_scalar(1.0 - self.lr * self.weight_decay)?;
                    } else {
                        g = g.add(&value.mul_scalar(self.weight_decay)?)?;
                    }
                }
                let m_new = m.get().mul_scalar(b1)?.add(&g.mul_scalar(1.0 - b1)?)?;
                let v_new = v.get().mul_scalar(b2)?.add(&g.mul(&g)?.mul_scalar(1.0 - b2)?)?;
                m.set(m_new.clone())?;
                v.set(v_new.clone())?;
                // Bias corrections 1 - β^t, on the device (t is a device scalar).
                let tt = t.to_dtype(dt)?;
                let c1 = Tensor::full_on(&[], b1, dt, tt.device())?.pow(&tt)?.neg()?.add_scalar(1.0)?;
                let c2 = Tensor::full_on(&[], b2, dt, tt.device())?.pow(&tt)?.neg()?.add_scalar(1.0)?;
                let denom = v_new.div(&c2)?.sqrt()?.add_scalar(self.eps)?;
                let update = m_new.div(&c1)?.div(&denom)?.mul_scalar(self.lr)?;
                let new = value.sub(&update)?;
                if let Some(w) = master {
                    p.set(new.to_dtype(p.get().dtype())?)?;
                    w.set(new)?;
                } else {
                    p.set(new)?;
                }
            }
            Ok(())
        })
    }

    fn zero_grad(&self) {
        self.params.iter().for_each(Var::zero_grad);
    }

    fn params(&self) -> &[Var] {
        &self.params
    }

    /// The running averages (`<name>.exp_avg`, `<name>.exp_avg_sq`), the step count
    /// (`adam.step`) and, with master weights on, the f32 copies (`<name>.master`).
    fn state(&self) -> Vec<Var> {
        let mut all: Vec<Var> = self.m.iter().chain(&self.v).cloned().collect();
        all.push(self.t.clone());
        all.extend(self.master.iter().flatten().cloned());
        all
    }
}
