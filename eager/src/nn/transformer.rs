//! Transformer blocks built from the attention, norm and linear layers.

use super::{gelu_exact, prefixed, LayerNorm, Linear, Module, MultiheadAttention, StaticKvCache};
use crate::error::Result;
use crate::tensor::Tensor;
use crate::var::Var;

/// A pre-norm transformer block (GPT-2's): `x + attn(ln1(x))`, then `h + mlp(ln2(h))` with a
/// GELU (exact) MLP of `dim -> hidden -> dim`. Inputs `[B, T, dim]`.
pub struct TransformerBlock {
    /// The norm before attention.
    pub ln1: LayerNorm,
    /// The self-attention.
    pub attn: MultiheadAttention,
    /// The norm before the MLP.
    pub ln2: LayerNorm,
    /// The MLP's first layer, `dim -> hidden`.
    pub fc: Linear,
    /// The MLP's second layer, `hidden -> dim`.
    pub proj: Linear,
}

impl TransformerBlock {
    /// Causal attention, an MLP of `4 dim`.
    pub fn new(dim: usize, heads: usize) -> Result<TransformerBlock> {
        TransformerBlock::with_options(dim, heads, 4 * dim, true)
    }

    /// A block with an MLP of `hidden`, causal attention if `causal`.
    pub fn with_options(dim: usize, heads: usize, hidden: usize, causal: bool) -> Result<TransformerBlock> {
        Ok(TransformerBlock {
            ln1: LayerNorm::new(dim)?,
            attn: MultiheadAttention::new(dim, heads, causal)?,
            ln2: LayerNorm::new(dim)?,
            fc: Linear::new(dim, hidden)?,
            proj: Linear::new(hidden, dim)?,
        })
    }

    fn mlp(&self, h: &Tensor) -> Result<Tensor> {
        h.add(&self.proj.forward(&gelu_exact(&self.fc.forward(&self.ln2.forward(h)?)?)?)?)
    }

    /// One new position `[B, 1, dim]` through the block, its attention over `cache` (see
    /// [`MultiheadAttention::decode`]).
    pub fn decode(&self, x: &Tensor, cache: &mut StaticKvCache) -> Result<Tensor> {
        self.mlp(&x.add(&self.attn.decode(&self.ln1.forward(x)?, cache)?)?)
    }
}

impl Module for TransformerBlock {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.mlp(&x.add(&self.attn.forward(&self.ln1.forward(x)?)?)?)
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        let mut v = prefixed("ln1", self.ln1.named_parameters());
        v.extend(prefixed("attn", self.attn.named_parameters()));
        v.extend(prefixed("ln2", self.ln2.named_parameters()));
        v.extend(prefixed("fc", self.fc.named_parameters()));
        v.extend(prefixed("proj", self.proj.named_parameters()));
        v
    }
}
