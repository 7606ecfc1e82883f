//! Normalisation layers and functions: layer norm, RMS norm and batch norm (torch's
//! `nn.LayerNorm`, `F.layer_norm`, `nn.RMSNorm`, `F.batch_norm`, `nn.BatchNorm2d`).
//! f16 and bf16 inputs are normalised in f32 (statistics, scale and shift) and rounded once,
//! as torch: within half an ulp of the exact result. Under [`autocast`](mod@crate::autocast) they are on
//! the f32 list (their result is f32, as torch's autocast gives).

use std::sync::atomic::{AtomicBool, Ordering};

use super::Module;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::var::Var;

/// Normalises over the last dim to mean 0 and variance 1, then scales and shifts (learned).
pub struct LayerNorm {
    /// The learned scale (ones at first).
    pub weight: Var,
    /// The learned shift (zeros at first).
    pub bias: Var,
    /// Added to the variance for stability.
    pub eps: f64,
}

impl LayerNorm {
    /// A layer norm over a last dim of `dim`, f32.
    pub fn new(dim: usize) -> Result<LayerNorm> {
        Ok(LayerNorm {
            weight: Var::parameter("weight", Tensor::ones(&[dim], DType::F32)?)?,
            bias: Var::parameter("bias", Tensor::zeros(&[dim], DType::F32)?)?,
            eps: 1e-5,
        })
    }
}

impl Module for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (w, b) = (self.weight.get(), self.bias.get());
        layer_norm(x, &[w.shape()[0]], Some(&w), Some(&b), self.eps)
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        vec![("weight".to_string(), self.weight.clone()), ("bias".to_string(), self.bias.clone())]
    }
}

/// Layer normalisation over the trailing dims `shape` (torch's `F.layer_norm(x, shape, weight,
/// bias, eps)`): mean 0 and biased variance 1, then `weight` scales and `bias` shifts. Half
/// precision inputs are normalised in f32 and the result cast back, as torch computes it.
pub fn layer_norm(
    x: &Tensor,
    shape: &[usize],
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    let rank = x.rank();
    let fits = !shape.is_empty() && shape.len() <= rank && x.shape()[rank - shape.len()..] == *shape;
    let param_ok = |p: Option<&Tensor>| p.is_none_or(|p| p.shape() == shape);
    if !fits || !x.dtype().is_float() || !param_ok(weight) || !param_ok(bias) {
        let describe = |p: Option<&Tensor>| p.map_or("none".to_string(), |p| p.spec().to_string());
        let msg = format!(
            "needs a float input ending in {shape:?} and weight and bias of that shape, got {}, {} and {}",
            x.spec(),
            describe(weight),
            describe(bias)
        );
        return Err(Error::shape("layer_norm", msg));
    }
    let x = &crate::ops::autocast_f32(x)?;
    crate::compile::fused_op("layer_norm", || {
        let dtype = x.dtype();
        let x32 = upcast(x)?;
        let over: Vec<isize> = (rank - shape.len()..rank).map(|d| d as isize).collect();
        let centered = x32.sub(&x32.mean(&over, true)?)?;
        let var = centered.square()?.mean(&over, true)?;
        let mut y = centered.mul(&var.add_scalar(eps)?.rsqrt()?)?;
        if let Some(w) = weight {
            y = y.mul(&w.to_dtype(x32.dtype())?)?;
        }
        if let Some(b) = bias {
            y = y.add(&b.to_dtype(x32.dtype())?)?;
        }
        y.to_dtype(dtype)
    })
}

/// Root-mean-square normalisation over the last dim, then `weight` scales (torch's
/// `F.rms_norm`, Llama's `LlamaRMSNorm`): half precision is normalised and scaled in f32 and
/// rounded once, as torch's `F.rms_norm` (≤ 0.5 ulp; transformers' `LlamaRMSNorm` rounds
/// before the scale too, so it can differ from this by one ulp).
pub fn rms_norm(x: &Tensor, weight: Option<&Tensor>, eps: f64) -> Result<Tensor> {
    let dim = x.shape().last().copied().unwrap_or(0);
    if let Some(w) = weight.filter(|w| w.shape() != [dim]) {
        let msg = format!("the weight must be [{dim}] for input {}, got {}", x.spec(), w.spec());
        return Err(Error::shape("rms_norm", msg));
    }
    let x = &crate::ops::autocast_f32(x)?;
    crate::compile::fused_op("rms_norm", || {
        let x32 = upcast(x)?;
        let y = x32.rms_norm(1, eps)?;
        match weight {
            Some(w) => y.mul(&w.to_dtype(x32.dtype())?)?.to_dtype(x.dtype()),
            None => y.to_dtype(x.dtype()),
        }
    })
}

/// f32 for f16 and bf16 (their statistics lose too much), the tensor itself otherwise.
fn upcast(x: &Tensor) -> Result<Tensor> {
    match x.dtype() {
        DType::BF16 | DType::F16 => x.to_dtype(DType::F32),
        _ => Ok(x.clone()),
    }
}

/// Root-mean-square normalisation with a learned scale (ones), as Llama's `LlamaRMSNorm`.
pub struct RmsNorm {
    /// The learned scale.
    pub weight: Var,
    /// Added to the mean square for stability.
    pub eps: f64,
    /// Added to the weight, in f32, before it scales (Gemma's `1 + weight`: 1, its weights
    /// start at zeros; 0 for every other family).
    pub offset: f64,
}

impl RmsNorm {
    /// An RMS norm over a last dim of `dim`, with `eps`, of `dtype`.
    pub fn new(dim: usize, eps: f64, dtype: DType) -> Result<RmsNorm> {
        Ok(RmsNorm { weight: Var::parameter("weight", Tensor::ones(&[dim], dtype)?)?, eps, offset: 0.0 })
    }

    /// Gemma's RMS norm, `x̂ · (1 + weight)`: weights zeros.
    pub fn gemma(dim: usize, eps: f64, dtype: DType) -> Result<RmsNorm> {
        Ok(RmsNorm { weight: Var::parameter("weight", Tensor::zeros(&[dim], dtype)?)?, eps, offset: 1.0 })
    }
}

impl Module for RmsNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let w = self.weight.get();
        if self.offset == 0.0 {
            return rms_norm(x, Some(&w), self.eps);
        }
        rms_norm(x, Some(&w.to_dtype(DType::F32)?.add_scalar(self.offset)?), self.eps)
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        vec![("weight".to_string(), self.weight.clone())]
    }
}

/// Batch normalisation over dim 1 of `[N, C, ...]` (torch's `F.batch_norm`). Training: each
/// channel is normalised with its batch mean and biased variance, and the running statistics
/// move towards the batch's (`new = (1 - momentum) old + momentum batch`, the variance
/// unbiased, as torch); evaluation: the running statistics normalise. Then `weight` scales and
/// `bias` shifts, per channel.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm(
    x: &Tensor,
    running_mean: &Var,
    running_var: &Var,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    training: bool,
    momentum: f64,
    eps: f64,
) -> Result<Tensor> {
    let shape = x.shape().to_vec();
    let channels = *shape.get(1).unwrap_or(&0);
    let stats = running_mean.get();
    if shape.len() < 2
        || !x.dtype().is_float()
        || stats.shape() != [channels]
        || running_var.get().shape() != [channels]
    {
        let msg = format!(
            "needs a float [N, C, ...] input and running statistics [C], got {}, {} and {}",
            x.spec(),
            stats.spec(),
            running_var.get().spec()
        );
        return Err(Error::shape("batch_norm", msg));
    }
    // Per-channel values broadcast against [N, C, 1, ...].
    let mut column = vec![1isize; shape.len()];
    column[1] = -1;
    // Half precision is normalised in f32 and rounded once (as torch); the running statistics
    // keep their own dtype (torch's are f32 beside a bf16 input too).
    let x = crate::ops::autocast_f32(x)?;
    let dtype = x.dtype();
    let x = upcast(&x)?;
    let compute = x.dtype();
    let normed = if training {
        let count: usize = shape.iter().enumerate().filter(|&(d, _)| d != 1).map(|(_, &s)| s).product();
        if count < 2 {
            let msg = format!("expected more than 1 value per channel when training, got input {}", x.spec());
            return Err(Error::invalid("batch_norm", msg));
        }
        let over: Vec<isize> = (0..shape.len() as isize).filter(|&d| d != 1).collect();
        let mean = x.mean(&over, true)?;
        let centered = x.sub(&mean)?;
        let var = centered.square()?.mean(&over, true)?;
        let unbiased = var.mul_scalar(count as f64 / (count - 1) as f64)?.reshape(&[-1])?;
        let blend = |old: &Var, batch: &Tensor| -> Result<()> {
            let old_value = old.get();
            let batch = batch.detach().to_dtype(old_value.dtype())?;
            old.set(old_value.mul_scalar(1.0 - momentum)?.add(&batch.mul_scalar(momentum)?)?)
        };
        blend(running_mean, &mean.reshape(&[-1])?)?;
        blend(running_var, &unbiased)?;
        centered.mul(&var.add_scalar(eps)?.rsqrt()?)?
    } else {
        let mean = stats.to_dtype(compute)?.reshape(&column)?;
        let inv = running_var.get().to_dtype(compute)?.add_scalar(eps)?.rsqrt()?.reshape(&column)?;
        x.sub(&mean)?.mul(&inv)?
    };
    let scaled = match weight {
        Some(w) => normed.mul(&w.to_dtype(compute)?.reshape(&column)?)?,
        None => normed,
    };
    let shifted = match bias {
        Some(b) => scaled.add(&b.to_dtype(compute)?.reshape(&column)?)?,
        None => scaled,
    };
    shifted.to_dtype(dtype)
}

/// Batch normalisation of `[N, C, H, W]` images, as torch's `nn.BatchNorm2d`: a learned scale
/// (ones) and shift (zeros) per channel, running mean (zeros) and variance (ones) as buffers,
/// momentum 0.1, eps 1e-5; training mode until [`Module::eval`].
pub struct BatchNorm2d {
    /// The learned scale per channel.
    pub weight: Var,
    /// The learned shift per channel.
    pub bias: Var,
    /// The running mean per channel, used in evaluation.
    pub running_mean: Var,
    /// The running variance per channel, used in evaluation.
    pub running_var: Var,
    /// Weight of the new batch's statistics in the running ones.
    pub momentum: f64,
    /// Added to the variance for stability.
    pub eps: f64,
    training: AtomicBool,
}

impl BatchNorm2d {
    /// A batch norm of `channels` channels, f32.
    pub fn new(channels: usize) -> Result<BatchNorm2d> {
        Ok(BatchNorm2d {
            weight: Var::parameter("weight", Tensor::ones(&[channels], DType::F32)?)?,
            bias: Var::parameter("bias", Tensor::zeros(&[channels], DType::F32)?)?,
            running_mean: Var::new("running_mean", Tensor::zeros(&[channels], DType::F32)?),
            running_var: Var::new("running_var", Tensor::ones(&[channels], DType::F32)?),
            momentum: 0.1,
            eps: 1e-5,
            training: AtomicBool::new(true),
        })
    }
}

impl Module for BatchNorm2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if x.rank() != 4 {
            return Err(Error::shape("BatchNorm2d", format!("needs [N, C, H, W], got {}", x.spec())));
        }
        let (w, b) = (self.weight.get(), self.bias.get());
        let training = self.training.load(Ordering::Relaxed);
        batch_norm(
            x,
            &self.running_mean,
            &self.running_var,
            Some(&w),
            Some(&b),
            training,
            self.momentum,
            self.eps,
        )
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        vec![("weight".to_string(), self.weight.clone()), ("bias".to_string(), self.bias.clone())]
    }

    fn named_buffers(&self) -> Vec<(String, Var)> {
        vec![
            ("running_mean".to_string(), self.running_mean.clone()),
            ("running_var".to_string(), self.running_var.clone()),
        ]
    }

    fn set_training(&self, on: bool) {
        self.training.store(on, Ordering::Relaxed);
    }
}
