//! Functional scaled dot-product attention (torch's `F.scaled_dot_product_attention`): a bool
//! or additive float mask, a causal rule, an explicit `scale`, dropout on the weights, and
//! fewer key/value heads than query heads (grouped-query attention, `enable_gqa=True`).
//! A query row with nothing to attend gives 0, as torch 2.9 does, not NaN.

use crate::dtype::DType;
use crate::error::{Error, Result};
// scalar_like: scalars made where a tensor is (also while tracing a compiled step).
use crate::ops::Operand;
use crate::tensor::Tensor;

/// What [`scaled_dot_product_attention`] takes beyond q, k and v; `Default` is torch's.
#[derive(Default, Clone, Copy)]
pub struct AttentionOptions<'a> {
    /// Bool (true where a query may attend) or float (added to the scores), broadcast to
    /// `[B, heads, L, S]`.
    pub mask: Option<&'a Tensor>,
    /// Query `i` attends keys `0..=i` only (on top of `mask`).
    pub causal: bool,
    /// Multiplies `q kᵀ`; `None` is `1 / √d`.
    pub scale: Option<f64>,
    /// Probability of zeroing each attention weight (the rest scaled by `1 / (1 - p)`).
    pub dropout: f64,
}

/// `softmax(q kᵀ scale + mask) v` for q `[B, H, L, d]`, k `[B, Hkv, S, d]`, v `[B, Hkv, S, dv]`
/// where `Hkv` divides `H` (each key/value head serves `H / Hkv` query heads). Scores and
/// the softmax are computed in f32 for half-precision inputs, the result cast back.
pub fn scaled_dot_product_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    opts: AttentionOptions,
) -> Result<Tensor> {
    let rank = q.rank();
    let bad_shapes = rank < 3
        || k.rank() != rank
        || v.rank() != rank
        || k.shape()[rank - 1] != q.shape()[rank - 1]
        || k.shape()[rank - 2] != v.shape()[rank - 2]
        || k.shape()[rank - 3] != v.shape()[rank - 3]
        || k.shape()[rank - 3] == 0
        || !q.shape()[rank - 3].is_multiple_of(k.shape()[rank - 3]);
    if bad_shapes {
        let msg = format!(
            "needs q [..., H, L, d], k [..., Hkv, S, d] and v [..., Hkv, S, dv] with Hkv dividing H, got {}, {} and {}",
            q.spec(),
            k.spec(),
            v.spec()
        );
        return Err(Error::shape("scaled_dot_product_attention", msg));
    }
    if !(0.0..1.0).contains(&opts.dropout) {
        let msg = format!("dropout must be in [0, 1), got {}", opts.dropout);
        return Err(Error::invalid("scaled_dot_product_attention", msg));
    }
    // Autocast's low-precision list (torch's), then one program, as torch's user-level ops
    // are (see compile::fused_op).
    let (q, k, v) =
        (&crate::ops::autocast_low(q)?, &crate::ops::autocast_low(k)?, &crate::ops::autocast_low(v)?);
    crate::compile::fused_op("attention", || {
        let (heads, kv) = (q.shape()[rank - 3], k.shape()[rank - 3]);
        let g = heads / kv;
        let (l, s, d) = (q.shape()[rank - 2], k.shape()[rank - 2], q.shape()[rank - 1]);
        let lead: Vec<isize> = q.shape()[..rank - 3].iter().map(|&x| x as isize).collect();
        let shaped = |tail: &[usize]| -> Vec<isize> {
            lead.iter().copied().chain(tail.iter().map(|&x| x as isize)).collect()
        };
        let scale = opts.scale.unwrap_or(1.0 / (d as f64).sqrt());
        let dtype = q.dtype();
        let compute = if matches!(dtype, DType::BF16 | DType::F16) { DType::F32 } else { dtype };
        // Each key/value head serves its g query heads as g·L rows of one product, so the keys
        // and values are read as they are, never repeated to H heads (a copy per layer per step).
        let grouped_q = q.reshape(&shaped(&[kv, g * l, d]))?;
        let mut scores = grouped_q
            .matmul_transposed(k, false, true)?
            .to_dtype(compute)?
            .mul_scalar(scale)?
            .reshape(&shaped(&[kv, g, l, s]))?;
        // A mask broadcasts to [..., H, L, S] (torch's rule); here to [..., Hkv, g, L, S].
        let grouped = |m: &Tensor| -> Result<Tensor> {
            let r = m.rank();
            if r < 3 {
                return Ok(m.clone());
            }
            let mut shape: Vec<isize> = m.shape()[..r - 3].iter().map(|&x| x as isize).collect();
            if m.shape()[r - 3] == heads {
                shape.extend([kv as isize, g as isize]);
            } else {
                shape.extend([1, 1]);
            }
            shape.extend([m.shape()[r - 2] as isize, m.shape()[r - 1] as isize]);
            m.reshape(&shape)
        };
        let mut keep: Option<Tensor> = None;
        if let Some(m) = opts.mask {
            if m.dtype() == DType::Bool {
                keep = Some(grouped(m)?);
            } else {
                scores = scores.add(&grouped(&m.to_dtype(compute)?)?)?;
            }
        }
        if opts.causal {
            let lower = Tensor::full_on(&[l, s], 1.0, DType::Bool, q.device())?.tril(0)?;
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
        // as 1, so its weights and result are 0, as torch's.
        let max = scores.max(&[-1], true)?;
        let zero = max.scalar_like(0.0)?;
        let max = max.eq(&neg_inf)?.where_cond(&zero, &max)?;
        let e = scores.sub(&max)?.exp()?;
        let sum = e.sum(&[-1], true)?;
        let sum = sum.eq(&zero)?.where_cond(&sum.scalar_like(1.0)?, &sum)?;
        let mut weights = e.div(&sum)?;
        if opts.dropout > 0.0 {
            let u = Tensor::random_on(crate::ops::Dist::Uniform, weights.shape(), compute, weights.device())?;
            let kept = u.ge_scalar(opts.dropout)?.to_dtype(compute)?;
            weights = weights.mul(&kept)?.div_scalar(1.0 - opts.dropout)?;
        }
        let dv = v.shape()[rank - 1];
        weights
            .to_dtype(dtype)?
            .reshape(&shaped(&[kv, g * l, s]))?
            .matmul(v)?
            .reshape(&shaped(&[heads, l, dv]))
    })
}

/// Key/value heads `[..., Hkv, S, d]` repeated to `heads` (each `heads / Hkv` times, adjacent,
/// as transformers' `repeat_kv`).
pub fn repeat_kv(x: &Tensor, heads: usize) -> Result<Tensor> {
    let rank = x.rank();
    let kv = x.shape()[rank - 3];
    if kv == heads {
        return Ok(x.clone());
    }
    let mut wide: Vec<usize> = x.shape().to_vec();
    wide.insert(rank - 2, heads / kv);
    let mut target: Vec<isize> = x.shape().iter().map(|&d| d as isize).collect();
    target[rank - 3] = heads as isize;
    x.unsqueeze((rank - 2) as isize)?.broadcast_to(&wide)?.reshape(&target)
}
