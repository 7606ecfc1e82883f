//! Ops written once on the primitives, with no definition of their own: each runs as the ops it
//! is made of (so gradients, the cache and the profiler see those). As tinygrad's mixin.
//!
//! Autocast ([`autocast`](mod@crate::autocast)): softmax, log_softmax, rms_norm and group_norm are on the f32
//! list (half inputs cast up, result f32); attention is on the low-precision list (q, k, v cast
//! to the autocast dtype); the others run as the ops they are made of.

use crate::dtype::DType;
use crate::error::{Error, Result};

use super::create::CreateOps;
use super::elementwise::ElementwiseOps;
use super::index::IndexOps;
use super::matmul::MatmulOps;
use super::movement::MovementOps;
use super::reduce::ReduceOps;
use super::Operand;

/// The composite ops, built on any [`Operand`] (the `Tensor` methods of the same names).
pub(crate) trait CompositeOps: Operand {
    /// `exp(x - max) / sum(exp(x - max))` along `dim`; f16/bf16 in f32, rounded once.
    fn softmax(&self, dim: isize) -> Result<Self> {
        let d = self.dim("softmax", dim)?;
        if self.shape_of()[d] == 0 {
            return Ok(self.clone()); // nothing to normalise (and an empty dim has no max)
        }
        in_f32(&super::autocast_f32(self)?, |x| {
            let shifted = x.sub(&x.max(&[dim], true)?)?;
            let e = shifted.exp()?;
            e.div(&e.sum(&[dim], true)?)
        })
    }

    /// `x - max - log(sum(exp(x - max)))` along `dim`; f16/bf16 in f32, rounded once.
    fn log_softmax(&self, dim: isize) -> Result<Self> {
        let d = self.dim("log_softmax", dim)?;
        if self.shape_of()[d] == 0 {
            return Ok(self.clone());
        }
        in_f32(&super::autocast_f32(self)?, |x| {
            let shifted = x.sub(&x.max(&[dim], true)?)?;
            let lse = shifted.exp()?.sum(&[dim], true)?.log()?;
            shifted.sub(&lse)
        })
    }

    /// `value` where `mask` is true, else `x` (`where(mask, value, x)`).
    fn masked_fill(&self, mask: &Self, value: f64) -> Result<Self> {
        mask.where_cond(&self.scalar_like(value)?, self)
    }

    /// `x / sqrt(mean(x²) + eps)` over the last `dims` dims (torch's `rms_norm` without its
    /// weight).
    fn rms_norm(&self, dims: usize, eps: f64) -> Result<Self> {
        let rank = self.rank_of();
        if dims == 0 || dims > rank || !self.dtype_of().is_float() {
            let msg =
                format!("needs 1 to {rank} trailing dims of a float tensor, got {dims} of {}", self.spec());
            return Err(Error::invalid("rms_norm", msg));
        }
        let over: Vec<isize> = (rank - dims..rank).map(|d| d as isize).collect();
        in_f32(&super::autocast_f32(self)?, |x| {
            x.mul(&x.square()?.mean(&over, true)?.add_scalar(eps)?.rsqrt()?)
        })
    }

    /// Each of `groups` groups of channels (dim 1 of `[N, C, ...]`) normalised to mean 0 and
    /// variance 1 (biased, as torch's `group_norm` without its weight and bias).
    fn group_norm(&self, groups: usize, eps: f64) -> Result<Self> {
        let shape = self.shape_of().to_vec();
        if shape.len() < 2 || groups == 0 || !shape[1].is_multiple_of(groups) || !self.dtype_of().is_float() {
            let msg = format!(
                "needs a float [N, C, ...] tensor with C divisible by {groups} groups, got {}",
                self.spec()
            );
            return Err(Error::invalid("group_norm", msg));
        }
        in_f32(&super::autocast_f32(self)?, |x| {
            let grouped = x.reshape(&[shape[0] as isize, groups as isize, -1])?;
            let mean = grouped.mean(&[2], true)?;
            let centered = grouped.sub(&mean)?;
            let var = centered.square()?.mean(&[2], true)?;
            let normed = centered.mul(&var.add_scalar(eps)?.rsqrt()?)?;
            normed.reshape(&super::signed(&shape))
        })
    }

    /// `softmax(q kᵀ / √d + mask) v` over `[..., L, d]` queries and `[..., S, d]` keys and
    /// values (torch's `scaled_dot_product_attention`): `mask` is bool, true where a query may
    /// attend (broadcast to `[..., L, S]`); `causal` lets query `i` attend keys `0..=i`. A row
    /// with nothing to attend gives NaN, as torch.
    fn scaled_dot_product_attention(
        &self,
        k: &Self,
        v: &Self,
        mask: Option<&Self>,
        causal: bool,
    ) -> Result<Self> {
        let (q, k, v) = (&super::autocast_low(self)?, &super::autocast_low(k)?, &super::autocast_low(v)?);
        let rank = q.rank_of();
        if rank < 2 || k.rank_of() < 2 || v.rank_of() < 2 {
            let msg = format!(
                "needs [..., L, d] queries, keys and values, got {}, {} and {}",
                q.spec(),
                k.spec(),
                v.spec()
            );
            return Err(Error::shape("scaled_dot_product_attention", msg));
        }
        let d = q.shape_of()[rank - 1];
        let scores = q.matmul_transposed(k, false, true)?.mul_scalar(1.0 / (d as f64).sqrt())?;
        let (l, s) = (scores.shape_of()[scores.rank_of() - 2], scores.shape_of()[scores.rank_of() - 1]);
        let mut keep = mask.cloned();
        if causal {
            let lower = q.full_at(&[l, s], 1.0, crate::dtype::DType::Bool)?.tril(0)?;
            keep = Some(match keep {
                Some(m) => m.where_cond(&lower, &m)?, // m and lower
                None => lower,
            });
        }
        match keep {
            Some(m) => {
                let neg_inf = scores.scalar_like(f64::NEG_INFINITY)?;
                let scores = m.where_cond(&scores, &neg_inf)?;
                // A row with nothing to attend has weights 0 (torch's answer), not 0/0.
                let dead = scores.max(&[-1], true)?.eq(&neg_inf)?;
                let weights = scores.softmax(-1)?;
                dead.where_cond(&weights.scalar_like(0.0)?, &weights)?.matmul(v)
            }
            None => scores.softmax(-1)?.matmul(v),
        }
    }

    /// `[*, classes]` i64 rows with a 1 at each index (torch's `one_hot`): a scatter of ones,
    /// so indices are checked as `scatter_add` checks them.
    fn one_hot(&self, classes: usize) -> Result<Self> {
        if !matches!(self.dtype_of(), crate::dtype::DType::I32 | crate::dtype::DType::I64) {
            return Err(Error::dtype("one_hot", format!("indices must be i32 or i64, got {}", self.spec())));
        }
        if let Some((lo, hi)) = self.host_bounds().filter(|(lo, hi)| lo <= hi) {
            if lo < 0 || hi >= classes as i64 {
                let bad = if lo < 0 { lo } else { hi };
                return Err(Error::invalid("one_hot", format!("class {bad} is not in 0..{classes}")));
            }
        }
        let mut shape = self.shape_of().to_vec();
        shape.push(classes);
        let zeros = self.full_at(&shape, 0.0, crate::dtype::DType::I64)?;
        let index = self.unsqueeze(-1)?;
        let ones = self.full_at(index.shape_of(), 1.0, crate::dtype::DType::I64)?;
        zeros.scatter_add(-1, &index, &ones)
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

/// `f` on `x` computed in f32 when `x` is f16 or bf16, its result rounded once back to the
/// half type (as torch computes softmax and the norms: statistics that each round in half
/// precision drift by several ulps); `f` on `x` itself for other dtypes.
pub(crate) fn in_f32<S: Operand>(x: &S, f: impl FnOnce(&S) -> Result<S>) -> Result<S> {
    match x.dtype_of() {
        DType::F16 | DType::BF16 => f(&x.to_dtype(DType::F32)?)?.to_dtype(x.dtype_of()),
        _ => f(x),
    }
}
