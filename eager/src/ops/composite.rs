//! Ops written once on the primitives, with no definition of their own: each runs as the ops it
//! is made of (so gradients, the cache and the profiler see those). As tinygrad's mixin.

use crate::error::{Error, Result};

use super::elementwise::ElementwiseOps;
use super::reduce::ReduceOps;
use super::Operand;

/// The composite ops, built on any [`Operand`] (the `Tensor` methods of the same names).
pub(crate) trait CompositeOps: Operand {
    /// `exp(x - max) / sum(exp(x - max))` along `dim`.
    fn softmax(&self, dim: isize) -> Result<Self> {
        let d = self.dim("softmax", dim)?;
        if self.shape_of()[d] == 0 {
            return Ok(self.clone()); // nothing to normalise (and an empty dim has no max)
        }
        let shifted = self.sub(&self.max(&[dim], true)?)?;
        let e = shifted.exp()?;
        e.div(&e.sum(&[dim], true)?)
    }

    /// `x - max - log(sum(exp(x - max)))` along `dim`.
    fn log_softmax(&self, dim: isize) -> Result<Self> {
        let d = self.dim("log_softmax", dim)?;
        if self.shape_of()[d] == 0 {
            return Ok(self.clone());
        }
        let shifted = self.sub(&self.max(&[dim], true)?)?;
        let lse = shifted.exp()?.sum(&[dim], true)?.log()?;
        shifted.sub(&lse)
    }

    /// `value` where `mask` is true, else `x` (`where(mask, value, x)`).
    fn masked_fill(&self, mask: &Self, value: f64) -> Result<Self> {
        mask.where_cond(&self.scalar_like(value)?, self)
    }

    /// `x * x`.
    fn square(&self) -> Result<Self> {
        self.mul(self)
    }

    /// `x * sigmoid(x)` (swish).
    fn silu(&self) -> Result<Self> {
        self.mul(&self.sigmoid()?)
    }

    /// `max(x, min)` then `min(., max)`, as torch (so `min > max` gives `max`); NaN stays NaN.
    fn clamp(&self, min: Option<f64>, max: Option<f64>) -> Result<Self> {
        if min.is_none() && max.is_none() {
            return Err(Error::invalid("clamp", "needs a min, a max or both"));
        }
        let low = match min {
            Some(v) => self.maximum_scalar(v)?,
            None => self.clone(),
        };
        match max {
            Some(v) => low.minimum_scalar(v),
            None => Ok(low),
        }
    }
}

impl<T: Operand> CompositeOps for T {}
