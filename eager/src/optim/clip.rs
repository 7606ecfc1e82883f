//! Gradient clipping by the global norm, as torch's `torch.nn.utils.clip_grad_norm_`: the
//! norm of all gradients together (as if concatenated), and every gradient scaled by
//! `min(1, max_norm / (norm + 1e-6))`. Computed in f32 (f64 if a gradient is f64) whatever
//! the gradients' dtype, and each gradient rounded back once; torch takes each gradient's norm
//! in its own dtype first, so on half-precision gradients its total can differ in the last
//! bits of that dtype.

use crate::autograd::no_grad;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::var::Var;

/// Clips the gradients of `params` (those that have one) to a global `norm_type`-norm of at
/// most `max_norm` (`f64::INFINITY` for the largest magnitude) and returns the norm they had,
/// as a 0-d tensor: `torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)`. A NaN or
/// infinite norm makes every gradient NaN, as torch's (call it after
/// [`GradScaler::unscale_`](super::GradScaler::unscale_), which skips such steps).
pub fn clip_grad_norm_(params: &[Var], max_norm: f64, norm_type: f64) -> Result<Tensor> {
    if norm_type.is_nan() || norm_type <= 0.0 {
        let msg = format!("norm_type must be positive or infinite, got {norm_type}");
        return Err(Error::invalid("clip_grad_norm_", msg));
    }
    let grads: Vec<(&Var, Tensor)> =
        params.iter().filter(|p| p.requires_grad()).filter_map(|p| Some((p, p.grad()?))).collect();
    let Some((_, first)) = grads.first() else {
        return Tensor::full(&[], 0.0, DType::F32); // torch: tensor(0.) when nothing has a gradient
    };
    let acc = if grads.iter().any(|(_, g)| g.dtype() == DType::F64) { DType::F64 } else { DType::F32 };
    let device = first.device();
    let _full_precision = crate::autocast::AutocastGuard::off();
    no_grad(|| {
        crate::compile::fused_op("clip_grad_norm", || {
            let mut total: Option<Tensor> = None;
            for (_, g) in &grads {
                let a = g.to_dtype(acc)?.abs()?;
                let part = if norm_type.is_infinite() {
                    a.max(&[], false)?
                } else if norm_type == 2.0 {
                    a.square()?.sum_all()?
                } else {
                    a.pow_scalar(norm_type)?.sum_all()?
                };
                total = Some(match total {
                    None => part,
                    Some(t) if norm_type.is_infinite() => t.maximum(&part)?,
                    Some(t) => t.add(&part)?,
                });
            }
            let total = total.expect("at least one gradient");
            let norm = if norm_type.is_infinite() {
                total
            } else if norm_type == 2.0 {
                total.sqrt()?
            } else {
                total.pow_scalar(1.0 / norm_type)?
            };
            let coef = Tensor::full_on(&[], max_norm, acc, device)?
                .div(&norm.add_scalar(1e-6)?)?
                .clamp(None, Some(1.0))?;
            for (p, g) in &grads {
                p.set_grad(Some(g.to_dtype(acc)?.mul(&coef)?.to_dtype(g.dtype())?))?;
            }
            Ok(norm)
        })
    })
}
