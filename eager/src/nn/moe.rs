//! A sparse mixture of experts (Mixtral's `block_sparse_moe`): a router picks `top_k` of
//! `E` SwiGLU experts per token (softmax over the router's logits in f32, the top `k`
//! weights renormalised to sum to 1 where `norm_topk_prob`), and the token's output is their
//! weighted sum. The experts' weights are stacked (`w1`, `w3`: `[E, I, H]`; `w2`:
//! `[E, H, I]`), so every expert runs in one batched matmul:
//!
//! - **grouped** (the routed tokens gathered per expert): each (token, choice) pair takes a
//!   slot of its expert, `[E, C, H]` is gathered from the tokens, the experts run as one
//!   batched matmul and each pair reads its slot back. The capacity `C` is the token count:
//!   no token is dropped (MaxText's dropless "dense" MoE), so outputs equal transformers';
//! - **gathered weights**, when fewer (token, choice) pairs than experts (decoding a few
//!   sequences): each pair gathers its expert's weights, so a step reads `n·k` experts, not
//!   all `E`;
//! - a **shared expert** (Qwen2-MoE's), where there is one, runs on every token beside the
//!   routed ones, its output scaled by `sigmoid(shared_expert_gate(x))`;
//! - **expert parallel**, when the stacked weights are split over a mesh axis on their expert
//!   dim: the tokens are split over the same axis in groups, each group fills its own slots,
//!   an `all_to_all` sends each expert's slots to the devices holding it, and a second one
//!   brings the results back (GShard's layout). Outputs equal one device's.

use super::{prefixed, Linear, Module, SwiGlu};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::mesh::{Mesh, PartitionSpec as P};
use crate::ops::create::CreateOps;
use crate::tensor::Tensor;
use crate::var::Var;

/// Mixtral's sparse MoE block: a router (`gate`) and `E` SwiGLU experts, stacked.
pub struct SparseMoe {
    /// The router: `hidden -> experts`, no bias.
    pub gate: Linear,
    /// Every expert's gate projection, `[E, intermediate, hidden]` (Mixtral's `w1`).
    pub w1: Var,
    /// Every expert's down projection, `[E, hidden, intermediate]` (Mixtral's `w2`).
    pub w2: Var,
    /// Every expert's up projection, `[E, intermediate, hidden]` (Mixtral's `w3`).
    pub w3: Var,
    /// Experts per token (`num_experts_per_tok`).
    pub top_k: usize,
    /// Whether the chosen experts' weights are renormalised to sum to 1 (Mixtral always;
    /// Qwen2-MoE's `norm_topk_prob`).
    pub norm_topk_prob: bool,
    /// An expert every token goes through (Qwen2-MoE's `shared_expert`), with its gate
    /// (`shared_expert_gate`, `hidden -> 1`, through a sigmoid).
    pub shared_expert: Option<(SwiGlu, Linear)>,
}

impl SparseMoe {
    /// A block of `experts` experts of `hidden -> intermediate -> hidden`, weights N(0, 0.02).
    pub fn new(
        hidden: usize,
        intermediate: usize,
        experts: usize,
        top_k: usize,
        dtype: DType,
    ) -> Result<Self> {
        let normal = |shape: &[usize]| -> Result<Var> {
            Var::parameter("weight", Tensor::randn(shape, DType::F32)?.mul_scalar(0.02)?.to_dtype(dtype)?)
        };
        let moe = SparseMoe {
            gate: Linear { weight: normal(&[experts, hidden])?, bias: None },
            w1: normal(&[experts, intermediate, hidden])?,
            w2: normal(&[experts, hidden, intermediate])?,
            w3: normal(&[experts, intermediate, hidden])?,
            top_k,
            norm_topk_prob: true,
            shared_expert: None,
        };
        moe.check()?;
        Ok(moe)
    }

    /// The number of experts.
    pub fn experts(&self) -> usize {
        self.w1.get().shape()[0]
    }

    fn check(&self) -> Result<()> {
        let e = self.experts();
        if self.top_k == 0 || self.top_k > e {
            let msg = format!("top_k {} must be in 1..={e} (the experts)", self.top_k);
            return Err(Error::invalid("SparseMoe", msg));
        }
        let (w1, w2, w3) = (self.w1.get(), self.w2.get(), self.w3.get());
        let (i, h) = (w1.shape()[1], w1.shape()[2]);
        if w1.rank() != 3 || w3.shape() != w1.shape() || w2.shape() != [e, h, i] {
            let msg = format!(
                "experts' weights w1 {:?}, w3 {:?}, w2 {:?}: want [E, I, H], [E, I, H], [E, H, I]",
                w1.shape(),
                w3.shape(),
                w2.shape()
            );
            return Err(Error::invalid("SparseMoe", msg));
        }
        Ok(())
    }

    /// The router's choice for tokens `[.., n, H]`: the weights `[.., n, k]` (in `x`'s dtype)
    /// and the experts `[.., n, k]` (i64), as transformers' `MixtralTopKRouter`.
    pub fn route(&self, x: &Tensor) -> Result<(Tensor, Tensor)> {
        let probs = self.gate.forward(x)?.to_dtype(DType::F32)?.softmax(-1)?;
        let (top, experts) = probs.topk(self.top_k, -1, true)?;
        let top = if self.norm_topk_prob { top.div(&top.sum(&[-1], true)?)? } else { top };
        Ok((top.to_dtype(x.dtype())?, experts))
    }

    /// The mesh axis the experts are split over (dim 0 of `w1`), if any.
    fn expert_axis(&self) -> Option<(Mesh, String, usize)> {
        let w1 = self.w1.get();
        let s = w1.sharding()?;
        let axes = s.spec().axes_of(0);
        (axes.len() == 1).then(|| (s.mesh().clone(), axes[0].clone(), s.parts(0)))
    }

    /// The experts on gathered slots `[.., E, C, H]` → `[.., E, C, H]`.
    fn experts_on(&self, slots: &Tensor) -> Result<Tensor> {
        let (w1, w2, w3) = (self.w1.get(), self.w2.get(), self.w3.get());
        let gate = slots.matmul_transposed(&w1, false, true)?;
        let up = slots.matmul_transposed(&w3, false, true)?;
        gate.silu()?.mul(&up)?.matmul_transposed(&w2, false, true)
    }

    /// One group of `n` tokens `[G, n, H]` (G groups side by side): each (token, choice) pair's
    /// slot in `[G, E·n]` and the slots' token index into `[G, n + 1, H]` (0: empty).
    fn slots(&self, experts: &Tensor, n: usize) -> Result<(Tensor, Tensor)> {
        let (g, k, e) = (experts.shape()[0], self.top_k, self.experts());
        let flat = experts.reshape(&[g as isize, (n * k) as isize])?;
        let onehot = flat.one_hot(e)?;
        // A pair's rank among the pairs routed to its expert, in token order.
        let rank = onehot.cumsum(1)?.mul(&onehot)?.sum(&[-1], false)?.sub_scalar(1.0)?;
        let slot = flat.mul_scalar(n as f64)?.add(&rank)?;
        // Each pair's token, counted from 1 (row 0 of the padded tokens is the empty slot's).
        let token = Tensor::arange_on(1.0, (n + 1) as f64, 1.0, DType::I64, flat.device())?
            .unsqueeze(1)?
            .broadcast_to(&[n, k])?
            .reshape(&[1, (n * k) as isize])?
            .broadcast_to(&[g, n * k])?;
        let token = match flat.sharding() {
            Some(s) => token.shard(s.mesh(), s.spec())?,
            None => token,
        };
        let index = flat.full_at(&[g, e * n], 0.0, DType::I64)?.scatter_add(1, &slot, &token)?;
        Ok((slot, index))
    }

    /// Grouped experts over `[G, n, H]` (see the file's contract); `axis` splits the groups
    /// and, between the two `all_to_all`s, the experts.
    fn grouped(
        &self,
        x: &Tensor,
        weights: &Tensor,
        experts: &Tensor,
        axis: Option<(&Mesh, &str)>,
    ) -> Result<Tensor> {
        let (g, n, h) = (x.shape()[0], x.shape()[1], x.shape()[2]);
        let (k, e) = (self.top_k, self.experts());
        let (slot, index) = self.slots(experts, n)?;
        let padded = Tensor::cat(&[&x.full_at(&[g, 1, h], 0.0, x.dtype())?, x], 1)?;
        let gather_rows = |t: &Tensor, idx: &Tensor, rows: usize| -> Result<Tensor> {
            t.gather(1, &idx.unsqueeze(-1)?.broadcast_to(&[g, rows, h])?)
        };
        let dispatched =
            gather_rows(&padded, &index, e * n)?.reshape(&[g as isize, e as isize, n as isize, -1])?;
        let out = match axis {
            None => self.experts_on(&dispatched)?,
            Some((mesh, axis)) => {
                // Each group's slots stay where the group is (the gathers' rules do not keep the
                // split: it is pinned), then go to the devices holding their expert, and back.
                let by_group = P::new(&[Some(axis), None, None, None]);
                let moved = dispatched.shard(mesh, &by_group)?.all_to_all(axis, 0, 1)?;
                let by_expert = moved.permute(&[1, 0, 2, 3])?.reshape(&[e as isize, (g * n) as isize, -1])?;
                let done = self.experts_on(&by_expert)?;
                let back = done.reshape(&[e as isize, g as isize, n as isize, -1])?.permute(&[1, 0, 2, 3])?;
                back.shard(mesh, &P::new(&[None, Some(axis), None, None]))?.all_to_all(axis, 1, 0)?
            }
        };
        let picked = gather_rows(&out.reshape(&[g as isize, (e * n) as isize, -1])?, &slot, n * k)?;
        let w = weights.reshape(&[g as isize, (n * k) as isize, 1])?;
        picked.mul(&w)?.reshape(&[g as isize, n as isize, k as isize, -1])?.sum(&[2], false)
    }

    /// Each (token, choice) pair with its own expert's weights, gathered: `[n, H]`.
    fn gathered(&self, x: &Tensor, weights: &Tensor, experts: &Tensor) -> Result<Tensor> {
        let (n, k) = (x.shape()[0], self.top_k);
        let flat = experts.reshape(&[(n * k) as isize])?;
        let pick = |w: &Var| w.get().index_select(0, &flat);
        let token = Tensor::arange_on(0.0, n as f64, 1.0, DType::I64, x.device())?
            .unsqueeze(1)?
            .broadcast_to(&[n, k])?
            .reshape(&[(n * k) as isize])?;
        let xs = x.index_select(0, &token)?.unsqueeze(1)?;
        let gate = xs.matmul_transposed(&pick(&self.w1)?, false, true)?;
        let up = xs.matmul_transposed(&pick(&self.w3)?, false, true)?;
        let y = gate.silu()?.mul(&up)?.matmul_transposed(&pick(&self.w2)?, false, true)?;
        let w = weights.reshape(&[(n * k) as isize, 1, 1])?;
        y.mul(&w)?.reshape(&[n as isize, k as isize, -1])?.sum(&[1], false)
    }
}

impl Module for SparseMoe {
    /// `[.., H]` tokens → `[.., H]`: each token's experts' outputs, weighted by the router.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.check()?;
        let shape = x.shape().to_vec();
        let h = *shape.last().ok_or_else(|| Error::invalid("SparseMoe", "a 0-d input has no hidden dim"))?;
        let n = x.numel() / h.max(1);
        let tokens = x.reshape(&[n as isize, h as isize])?;
        let out = match self.expert_axis() {
            Some((mesh, axis, parts)) => {
                if !self.experts().is_multiple_of(parts) {
                    let msg =
                        format!("{} experts split over {parts} devices of axis {axis:?}", self.experts());
                    return Err(Error::invalid("SparseMoe", msg));
                }
                // Tokens in one group per device (padded with zero tokens, dropped after).
                let per = n.div_ceil(parts);
                let pad = parts * per - n;
                let tokens = if pad == 0 {
                    tokens
                } else {
                    Tensor::cat(&[&tokens, &tokens.full_at(&[pad, h], 0.0, x.dtype())?], 0)?
                };
                let spec = P::new(&[Some(axis.as_str()), None, None]);
                let groups =
                    tokens.reshape(&[parts as isize, per as isize, h as isize])?.shard(&mesh, &spec)?;
                let (weights, experts) = self.route(&groups)?;
                let out = self.grouped(&groups, &weights, &experts, Some((&mesh, &axis)))?;
                out.reshape(&[(parts * per) as isize, h as isize])?.narrow(0, 0, n)?
            }
            None => {
                let (weights, experts) = self.route(&tokens)?;
                if n * self.top_k < self.experts() {
                    self.gathered(&tokens, &weights, &experts)?
                } else {
                    let one = |t: &Tensor| t.unsqueeze(0);
                    self.grouped(&one(&tokens)?, &one(&weights)?, &one(&experts)?, None)?.squeeze(0)?
                }
            }
        };
        let out = match &self.shared_expert {
            Some((expert, gate)) => {
                let tokens = x.reshape(&[n as isize, h as isize])?;
                out.add(&expert.forward(&tokens)?.mul(&gate.forward(&tokens)?.sigmoid()?)?)?
            }
            None => out,
        };
        out.reshape(&shape.iter().map(|&d| d as isize).collect::<Vec<_>>())
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        let mut v = prefixed("gate", self.gate.named_parameters());
        v.extend([
            ("experts.w1".to_string(), self.w1.clone()),
            ("experts.w2".to_string(), self.w2.clone()),
            ("experts.w3".to_string(), self.w3.clone()),
        ]);
        if let Some((expert, gate)) = &self.shared_expert {
            v.extend(prefixed("shared_expert", expert.named_parameters()));
            v.extend(prefixed("shared_expert_gate", gate.named_parameters()));
        }
        v
    }
}
