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
use super::random::{Dist, RandomOps};
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
            // The shift cancels in the result, so no gradient flows through the max (as JAX's
            // stop_gradient there): its backward would be a compare, a count and a scatter.
            let shifted = x.sub(&x.max(&[dim], true)?.detached())?;
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
            let shifted = x.sub(&x.max(&[dim], true)?.detached())?; // as softmax's
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

    /// `softmax(q kᵀ / √d + mask) v` (torch's `scaled_dot_product_attention` without scale
    /// or dropout): [`attention`] with those at their defaults.
    fn scaled_dot_product_attention(
        &self,
        k: &Self,
        v: &Self,
        mask: Option<&Self>,
        causal: bool,
    ) -> Result<Self> {
        attention(self, k, v, mask, causal, Scores::default(), 0.0)
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

/// The one attention (torch's `F.scaled_dot_product_attention`; `Tensor::scaled_dot_product_attention`
/// and `nn::scaled_dot_product_attention` are it): `softmax(q kᵀ scale + mask) v` for q
/// `[..., H, L, d]`, k `[..., Hkv, S, d]` and v `[..., Hkv, S, dv]`, leading dims broadcast as
/// matmul's batch dims. When `Hkv` divides `H` (grouped-query attention, torch's
/// `enable_gqa=True`) each key/value head serves `H / Hkv` adjacent query heads, read as they
/// are, never repeated. `mask`, broadcast to `[..., H, L, S]`, is bool (true where a query may
/// attend) or float (added to the scores); `causal` lets query `i` attend keys `0..=i` on top
/// of it; `scale` multiplies `q kᵀ` (`None`: `1 / √d`); `dropout` zeroes each weight with that
/// probability and scales the rest by `1 / (1 - p)`. The scores and the softmax are computed
/// in f32 for f16/bf16 inputs, the weights rounded back once before the product with v. A row
/// with nothing to attend gives 0, as torch 2.9, not NaN. q, k and v are on autocast's
/// low-precision list.
/// How attention's scores are made from `q kᵀ`: multiplied by `scale` (`None`: `1 / √d`), then,
/// with `softcap`, squashed to `cap · tanh(scores / cap)`.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Scores {
    pub scale: Option<f64>,
    pub softcap: Option<f64>,
}

pub(crate) fn attention<S: Operand>(
    q: &S,
    k: &S,
    v: &S,
    mask: Option<&S>,
    causal: bool,
    scores_opts: Scores,
    dropout: f64,
) -> Result<S> {
    let Scores { scale, softcap } = scores_opts;
    let (q, k, v) = (&super::autocast_low(q)?, &super::autocast_low(k)?, &super::autocast_low(v)?);
    let (qs, ks, vs) = (q.shape_of(), k.shape_of(), v.shape_of());
    let rank = qs.len();
    // Leading dims that broadcast (as matmul's batch dims): equal, or 1 on one side.
    let fits = |a: &[usize], b: &[usize]| {
        a.iter().rev().zip(b.iter().rev()).all(|(&x, &y)| x == y || x == 1 || y == 1)
    };
    let fit3 = |a: &[usize], b: &[usize], c: &[usize]| fits(a, b) && fits(a, c) && fits(b, c);
    let sized = rank >= 2
        && ks.len() >= 2
        && vs.len() >= 2
        && ks[ks.len() - 1] == qs[rank - 1]
        && ks[ks.len() - 2] == vs[vs.len() - 2];
    // Grouped: fewer key/value heads than query heads, dividing them.
    let grouped = sized
        && rank >= 3
        && ks.len() == rank
        && vs.len() == rank
        && ks[rank - 3] == vs[rank - 3]
        && ks[rank - 3] > 0
        && ks[rank - 3] < qs[rank - 3]
        && qs[rank - 3].is_multiple_of(ks[rank - 3])
        && fit3(&qs[..rank - 3], &ks[..rank - 3], &vs[..rank - 3]);
    let plain = sized && fit3(&qs[..rank - 2], &ks[..ks.len() - 2], &vs[..vs.len() - 2]);
    if !(grouped || plain) {
        let msg = format!(
            "needs q [..., H, L, d], k [..., Hkv, S, d] and v [..., Hkv, S, dv] (Hkv dividing H, leading dims broadcasting), got {}, {} and {}",
            q.spec(),
            k.spec(),
            v.spec()
        );
        return Err(Error::shape("scaled_dot_product_attention", msg));
    }
    if !(0.0..1.0).contains(&dropout) {
        let msg = format!("dropout must be in [0, 1), got {dropout}");
        return Err(Error::invalid("scaled_dot_product_attention", msg));
    }
    let (l, s, d, dv) = (qs[rank - 2], ks[ks.len() - 2], qs[rank - 1], vs[vs.len() - 1]);
    let scale = scale.unwrap_or(1.0 / (d as f64).sqrt());
    let dtype = q.dtype_of();
    let compute = if matches!(dtype, DType::BF16 | DType::F16) { DType::F32 } else { dtype };
    // Grouped, each key/value head serves its g query heads as g·L rows of one product: q
    // `[..., Hkv, g·L, d]`, the scores `[..., Hkv, g, L, S]` (and a mask's head dim split so).
    let (heads, kv) = if grouped { (qs[rank - 3], ks[rank - 3]) } else { (1, 1) };
    let g = heads / kv;
    // `x` with its dims from `from` on replaced by `tail`.
    let retail = |x: &S, from: usize, tail: &[usize]| -> Result<S> {
        let shape: Vec<isize> = x.shape_of()[..from].iter().chain(tail).map(|&n| n as isize).collect();
        x.reshape(&shape)
    };
    let grouped_mask = |m: &S| -> Result<S> {
        let (ms, r) = (m.shape_of(), m.rank_of());
        if !grouped || r < 3 {
            return Ok(m.clone());
        }
        let split = if ms[r - 3] == heads { [kv, g] } else { [1, 1] };
        retail(m, r - 3, &[split[0], split[1], ms[r - 2], ms[r - 1]])
    };
    let rows = if grouped { retail(q, rank - 3, &[kv, g * l, d])? } else { q.clone() };
    let mut scores = rows.matmul_transposed(k, false, true)?.to_dtype(compute)?.mul_scalar(scale)?;
    if let Some(cap) = softcap {
        // Gemma 2's soft cap, before the mask: `cap · tanh(scores / cap)`.
        scores = scores.div_scalar(cap)?.tanh()?.mul_scalar(cap)?;
    }
    if grouped {
        scores = retail(&scores, rank - 2, &[g, l, s])?;
    }
    let mut keep: Option<S> = None;
    if let Some(m) = mask {
        if m.dtype_of() == DType::Bool {
            keep = Some(grouped_mask(m)?);
        } else {
            scores = scores.add(&grouped_mask(&m.to_dtype(compute)?)?)?;
        }
    }
    if causal {
        let lower = q.full_at(&[l, s], 1.0, DType::Bool)?.tril(0)?;
        keep = Some(match keep {
            Some(m) => m.where_cond(&lower, &m)?, // m and lower
            None => lower,
        });
    }
    let neg_inf = scores.scalar_like(f64::NEG_INFINITY)?;
    if let Some(m) = &keep {
        scores = m.where_cond(&scores, &neg_inf)?;
    }
    // A row whose every score is -inf would give NaN (0/0): its max is taken as 0 and its sum
    // as 1, so its weights and result are 0, as torch's. The shift cancels: no gradient
    // flows through it (as softmax's).
    let max = scores.max(&[-1], true)?.detached();
    let zero = max.scalar_like(0.0)?;
    let max = max.eq(&neg_inf)?.where_cond(&zero, &max)?;
    let e = scores.sub(&max)?.exp()?;
    let sum = e.sum(&[-1], true)?;
    let sum = sum.eq(&zero)?.where_cond(&sum.scalar_like(1.0)?, &sum)?;
    let mut weights = e.div(&sum)?;
    if dropout > 0.0 {
        let u = S::random_on(Dist::Uniform, weights.shape_of(), compute, weights.device())?;
        let kept = u.ge_scalar(dropout)?.to_dtype(compute)?;
        weights = weights.mul(&kept)?.div_scalar(1.0 - dropout)?;
    }
    let weights = weights.to_dtype(dtype)?;
    if !grouped {
        return weights.matmul(v);
    }
    let out = retail(&weights, rank - 2, &[g * l, s])?.matmul(v)?;
    retail(&out, rank - 3, &[heads, l, dv])
}

/// `f` on `x` computed in f32 when `x` is f16 or bf16, its result rounded once back to the
/// half type (as torch computes softmax and the norms: statistics that each round in half
/// precision drift by several ulps); `f` on `x` itself for other dtypes.
pub(crate) fn in_f32<S: Operand>(x: &S, f: impl FnOnce(&S) -> Result<S>) -> Result<S> {
    match x.dtype_of() {
        DType::F16 | DType::BF16 => f(&x.to_dtype(DType::F32)?)?.to_dtype(x.dtype_of()),
        _ => f(x),
    }
}
