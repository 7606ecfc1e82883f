//! [`GradScaler`]: dynamic loss scaling for f16 training, as `torch.amp.GradScaler`. f16
//! gradients of small losses underflow to zero; scaling the loss by `S` before `backward`
//! scales every gradient by `S` too, and `unscale_` divides them back (in f32) before
//! clipping and the step. A step whose gradients hold an inf or NaN (the scale was too large)
//! is skipped and the scale backs off; after `growth_interval` good steps in a row it grows.
//!
//! The scale and the count of good steps live on the host (torch keeps them on the device but
//! reads the inf check back to decide the skip all the same): a scaler drives an eager loop,
//! not a compiled step. Unlike torch, f16 gradients may be unscaled (torch refuses them): the
//! f16 parameters of [`Adam::with_master_weights`](super::Adam::with_master_weights) have them.

use std::collections::HashMap;

use crate::autograd::no_grad;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shared::lock;
use crate::tensor::Tensor;

use super::Optimizer;

/// Where one optimizer is in the current iteration (torch's `OptState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Unscaled { found_inf: bool },
    Stepped { found_inf: bool },
}

#[derive(Debug)]
struct State {
    scale: f32,
    /// Good steps in a row since the scale last changed.
    growth_tracker: u64,
    /// Per optimizer (by address) in this iteration; emptied by `update`.
    stages: HashMap<usize, Stage>,
}

/// Dynamic loss scaling (torch's `torch.amp.GradScaler`): `scale(loss).backward()`, then
/// `unscale_(&opt)` if the gradients are to be clipped, `step(&opt)` (skipped when a gradient
/// is inf or NaN) and `update()` once per iteration.
#[derive(Debug)]
pub struct GradScaler {
    /// The scale's factor after `growth_interval` steps without inf or NaN.
    pub growth_factor: f64,
    /// The scale's factor after a step with inf or NaN.
    pub backoff_factor: f64,
    /// Good steps in a row before the scale grows.
    pub growth_interval: u64,
    enabled: bool,
    state: std::sync::Mutex<State>,
}

impl Default for GradScaler {
    fn default() -> Self {
        GradScaler::new()
    }
}

/// An optimizer's identity for the stages map.
fn id(opt: &dyn Optimizer) -> usize {
    opt as *const dyn Optimizer as *const () as usize
}

impl GradScaler {
    /// torch's defaults: scale 2^16, growth ×2 after 2000 good steps, back-off ×0.5.
    pub fn new() -> GradScaler {
        GradScaler::with_options(65536.0, 2.0, 0.5, 2000)
    }

    /// A scaler starting at `init_scale`, with the given growth and back-off.
    pub fn with_options(
        init_scale: f64,
        growth_factor: f64,
        backoff_factor: f64,
        growth_interval: u64,
    ) -> GradScaler {
        let state = State { scale: init_scale as f32, growth_tracker: 0, stages: HashMap::new() };
        GradScaler { growth_factor, backoff_factor, growth_interval, enabled: true, state: state.into() }
    }

    /// A scaler that does nothing (`enabled=False`): `scale` returns the loss, `step` steps.
    pub fn disabled() -> GradScaler {
        GradScaler { enabled: false, ..GradScaler::new() }
    }

    /// The current scale (torch's `get_scale()`; 1 when disabled).
    pub fn get_scale(&self) -> f64 {
        if !self.enabled {
            return 1.0;
        }
        lock(&self.state).scale as f64
    }

    /// Good steps in a row since the scale last changed.
    pub fn growth_tracker(&self) -> u64 {
        lock(&self.state).growth_tracker
    }

    /// `loss` times the scale. A 0-d half-precision loss comes back f32, as torch's (its
    /// scale is an f32 0-d tensor, which promotes a 0-d operand); others keep their dtype.
    pub fn scale(&self, loss: &Tensor) -> Result<Tensor> {
        if !self.enabled {
            return Ok(loss.clone());
        }
        let wide = match loss.dtype() {
            DType::F16 | DType::BF16 if loss.rank() == 0 => loss.to_dtype(DType::F32)?,
            _ => loss.clone(),
        };
        wide.mul_scalar(self.get_scale())
    }

    /// Divides the gradients of `opt`'s parameters by the scale (in f32, each rounded back
    /// once) and records whether any is inf or NaN. Once per optimizer per iteration, before
    /// clipping; [`GradScaler::step`] calls it if it was not.
    pub fn unscale_(&self, opt: &dyn Optimizer) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        if lock(&self.state).stages.contains_key(&id(opt)) {
            return Err(Error::invalid(
                "GradScaler::unscale_",
                "unscale_() was called on this optimizer already since the last update(), or after step()",
            ));
        }
        let inv = (1.0 / self.get_scale()) as f32 as f64; // torch: the f64 reciprocal, as f32
        let _full_precision = crate::autocast::AutocastGuard::off();
        let grads: Vec<_> =
            opt.params().iter().filter(|p| p.requires_grad()).filter_map(|p| Some((p, p.grad()?))).collect();
        let bad = no_grad(|| {
            crate::compile::fused_op("grad_scaler.unscale", || -> Result<Option<Tensor>> {
                let mut bad: Option<Tensor> = None;
                for (p, g) in &grads {
                    let wide = g.to_dtype(if g.dtype() == DType::F64 { DType::F64 } else { DType::F32 })?;
                    // x - x is 0 for finite x, NaN for inf and NaN.
                    let count = wide.sub(&wide)?.ne_scalar(0.0)?.to_dtype(DType::F32)?.sum_all()?;
                    bad = Some(match bad {
                        None => count,
                        Some(b) => b.add(&count)?,
                    });
                    p.set_grad(Some(wide.mul_scalar(inv)?.to_dtype(g.dtype())?))?;
                }
                Ok(bad)
            })
        })?;
        let found_inf = match bad {
            Some(b) => b.item::<f32>()? > 0.0,
            None => false,
        };
        lock(&self.state).stages.insert(id(opt), Stage::Unscaled { found_inf });
        Ok(())
    }

    /// Unscales `opt`'s gradients (if [`GradScaler::unscale_`] was not called) and steps it,
    /// unless a gradient is inf or NaN: then the step is skipped. Returns whether it stepped.
    pub fn step(&self, opt: &dyn Optimizer) -> Result<bool> {
        if !self.enabled {
            opt.step()?;
            return Ok(true);
        }
        let stage = lock(&self.state).stages.get(&id(opt)).copied();
        let found_inf = match stage {
            Some(Stage::Stepped { .. }) => {
                return Err(Error::invalid(
                    "GradScaler::step",
                    "step() was called already since the last update()",
                ));
            }
            Some(Stage::Unscaled { found_inf }) => found_inf,
            None => {
                self.unscale_(opt)?;
                matches!(lock(&self.state).stages.get(&id(opt)), Some(Stage::Unscaled { found_inf: true }))
            }
        };
        if !found_inf {
            opt.step()?;
        }
        lock(&self.state).stages.insert(id(opt), Stage::Stepped { found_inf });
        Ok(!found_inf)
    }

    /// Ends the iteration: backs the scale off if any optimizer found an inf or NaN, else
    /// counts a good step and grows the scale after `growth_interval` of them (torch's
    /// `_amp_update_scale_`). An error if no gradients were unscaled since the last update.
    pub fn update(&self) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        let mut st = lock(&self.state);
        if st.stages.is_empty() {
            return Err(Error::invalid(
                "GradScaler::update",
                "no inf checks were recorded before update(): call step() first",
            ));
        }
        let found_inf = st
            .stages
            .values()
            .any(|s| matches!(s, Stage::Unscaled { found_inf: true } | Stage::Stepped { found_inf: true }));
        if found_inf {
            st.scale = (st.scale as f64 * self.backoff_factor) as f32;
            st.growth_tracker = 0;
        } else if st.growth_tracker + 1 == self.growth_interval {
            let grown = (st.scale as f64 * self.growth_factor) as f32;
            if grown.is_finite() {
                st.scale = grown;
            }
            st.growth_tracker = 0;
        } else {
            st.growth_tracker += 1;
        }
        st.stages.clear();
        Ok(())
    }
}
