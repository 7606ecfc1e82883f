//! GPT-2: learned positions, LayerNorm, `gelu_new` (the tanh approximation), `Conv1D`
//! projections whose weights are stored `[in, out]` (kept so, under their names), and the
//! output head tied to the token embedding. Checkpoints name tensors `transformer.h.0.…`
//! (saved by `GPT2LMHeadModel`) or `h.0.…` (the original `gpt2` on the Hub): both load.

use eager::nn::{
    attend_heads, gelu, layer_norm, merge_heads, split_qkv, AttentionOptions, Embedding, LayerNorm, Module,
    StaticKvCache,
};
use eager::{DType, Device, Tensor, Var};

use crate::config::Config;
use crate::generate::CausalLm;
use crate::weights::Weights;
use crate::{ModelError, Result};

/// `y = x W + b` with `W` `[in, out]` (transformers' `Conv1D`).
pub struct Conv1D {
    /// `W`, `[in, out]`.
    pub weight: Var,
    /// `b`, `[out]`.
    pub bias: Var,
}

impl Conv1D {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let w = self.weight.get();
        let (inp, out) = (w.shape()[0] as isize, w.shape()[1] as isize);
        let mut shape: Vec<isize> = x.shape()[..x.rank() - 1].iter().map(|&d| d as isize).collect();
        shape.push(out);
        Ok(x.reshape(&[-1, inp])?.matmul(&w)?.add(&self.bias.get())?.reshape(&shape)?)
    }

    fn named(&self, prefix: &str) -> Vec<(String, Var)> {
        vec![(format!("{prefix}.weight"), self.weight.clone()), (format!("{prefix}.bias"), self.bias.clone())]
    }
}

/// One GPT-2 block: pre-norm attention, then pre-norm GELU MLP, each added to the residual.
pub struct Gpt2Block {
    /// The norm before attention.
    pub ln_1: LayerNorm,
    /// Query, key and value projections in one (`attn.c_attn`).
    pub c_attn: Conv1D,
    /// The attention's output projection (`attn.c_proj`).
    pub attn_c_proj: Conv1D,
    /// The norm before the MLP.
    pub ln_2: LayerNorm,
    /// The MLP's first projection (`mlp.c_fc`).
    pub c_fc: Conv1D,
    /// The MLP's second projection (`mlp.c_proj`).
    pub mlp_c_proj: Conv1D,
}

/// GPT-2 (`GPT2LMHeadModel`): token and position embeddings, the blocks, a final norm, and a head tied to the token embeddings.
pub struct Gpt2 {
    /// The checkpoint's configuration.
    pub config: Config,
    /// `"transformer."` or `""`, as the checkpoint named its tensors (saved back the same way).
    pub prefix: String,
    /// Token embeddings (also the output head's weight).
    pub wte: Embedding,
    /// Learned position embeddings.
    pub wpe: Embedding,
    /// The blocks, in order.
    pub h: Vec<Gpt2Block>,
    /// The final norm.
    pub ln_f: LayerNorm,
    /// The dtype the weights were loaded in.
    pub dtype: DType,
}

impl Gpt2 {
    /// Builds the model from `w` (tensors cast to `dtype`, uploaded to `device`), checking each against `cfg`.
    pub fn load(cfg: &Config, w: &Weights, dtype: DType, device: Device) -> Result<Gpt2> {
        if !matches!(cfg.hidden_act.as_str(), "gelu_new" | "gelu_pytorch_tanh") {
            return Err(ModelError::Unsupported(format!(
                "GPT-2 activation `{}` (only gelu_new)",
                cfg.hidden_act
            )));
        }
        let prefix = if w.contains("wte.weight") && !w.contains("transformer.wte.weight") {
            ""
        } else {
            "transformer."
        };
        let (d, inner) = (cfg.hidden_size, cfg.intermediate_size);
        let param = |name: &str, shape: &[usize]| -> Result<Var> {
            let full = format!("{prefix}{name}");
            Ok(Var::parameter(name.rsplit('.').next().unwrap_or(name), w.get(&full, shape, dtype, device)?)?)
        };
        let conv = |name: &str, inp: usize, out: usize| -> Result<Conv1D> {
            Ok(Conv1D {
                weight: param(&format!("{name}.weight"), &[inp, out])?,
                bias: param(&format!("{name}.bias"), &[out])?,
            })
        };
        let ln = |name: &str| -> Result<LayerNorm> {
            Ok(LayerNorm {
                weight: param(&format!("{name}.weight"), &[d])?,
                bias: param(&format!("{name}.bias"), &[d])?,
                eps: cfg.norm_eps,
            })
        };
        let h = (0..cfg.num_hidden_layers)
            .map(|l| {
                Ok(Gpt2Block {
                    ln_1: ln(&format!("h.{l}.ln_1"))?,
                    c_attn: conv(&format!("h.{l}.attn.c_attn"), d, 3 * d)?,
                    attn_c_proj: conv(&format!("h.{l}.attn.c_proj"), d, d)?,
                    ln_2: ln(&format!("h.{l}.ln_2"))?,
                    c_fc: conv(&format!("h.{l}.mlp.c_fc"), d, inner)?,
                    mlp_c_proj: conv(&format!("h.{l}.mlp.c_proj"), inner, d)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Gpt2 {
            config: cfg.clone(),
            prefix: prefix.to_string(),
            wte: Embedding { weight: param("wte.weight", &[cfg.vocab_size, d])? },
            wpe: Embedding { weight: param("wpe.weight", &[cfg.max_position_embeddings, d])? },
            h,
            ln_f: ln("ln_f")?,
            dtype,
        })
    }

    fn heads(&self) -> usize {
        self.config.num_attention_heads
    }
}

impl CausalLm for Gpt2 {
    fn config(&self) -> &Config {
        &self.config
    }

    fn new_cache(&self, batch: usize, capacity: usize) -> Result<Vec<StaticKvCache>> {
        let (heads, dim) = (self.heads(), self.config.hidden_size / self.heads());
        let dev = self.wte.weight.get().device();
        Ok((0..self.h.len())
            .map(|_| StaticKvCache::new(batch, heads, capacity, dim, self.dtype, dev))
            .collect::<eager::Result<_>>()?)
    }

    fn step(
        &self,
        ids: &Tensor,
        positions: &Tensor,
        mask: &Tensor,
        mut cache: Option<(&mut [StaticKvCache], &Tensor)>,
    ) -> Result<Tensor> {
        let mut x = self.wte.lookup(ids)?.add(&self.wpe.lookup(positions)?)?;
        let (b, t) = (ids.shape()[0] as isize, ids.shape()[1] as isize);
        let (heads, d) = (self.heads(), self.config.hidden_size);
        for (i, blk) in self.h.iter().enumerate() {
            let [q, k, v] = split_qkv(&blk.c_attn.forward(&blk.ln_1.forward(&x)?)?, heads)?;
            let layer_cache = cache.as_mut().map(|(c, start)| (&mut c[i], *start));
            let a = attend_heads(&q, &k, &v, AttentionOptions::causal_under(Some(mask)), layer_cache)?;
            let a = blk.attn_c_proj.forward(&merge_heads(&a)?)?;
            x = x.add(&a)?;
            let m = blk.mlp_c_proj.forward(&gelu(&blk.c_fc.forward(&blk.ln_2.forward(&x)?)?)?)?;
            x = x.add(&m)?;
        }
        let x =
            layer_norm(&x, &[d], Some(&self.ln_f.weight.get()), Some(&self.ln_f.bias.get()), self.ln_f.eps)?;
        // The head is the token embedding, transposed (tied), as one [B T, d] matrix product.
        let logits = x.reshape(&[-1, d as isize])?.matmul_transposed(&self.wte.weight.get(), false, true)?;
        Ok(logits.reshape(&[b, t, -1])?)
    }
}

impl Module for Gpt2 {
    fn forward(&self, ids: &Tensor) -> eager::Result<Tensor> {
        self.logits(ids, None).map_err(|e| crate::to_eager("Gpt2", e))
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        let p = &self.prefix;
        let mut v = vec![
            (format!("{p}wte.weight"), self.wte.weight.clone()),
            (format!("{p}wpe.weight"), self.wpe.weight.clone()),
        ];
        for (i, blk) in self.h.iter().enumerate() {
            let n = format!("{p}h.{i}");
            v.extend(blk.ln_1.named_parameters().into_iter().map(|(k, var)| (format!("{n}.ln_1.{k}"), var)));
            v.extend(blk.c_attn.named(&format!("{n}.attn.c_attn")));
            v.extend(blk.attn_c_proj.named(&format!("{n}.attn.c_proj")));
            v.extend(blk.ln_2.named_parameters().into_iter().map(|(k, var)| (format!("{n}.ln_2.{k}"), var)));
            v.extend(blk.c_fc.named(&format!("{n}.mlp.c_fc")));
            v.extend(blk.mlp_c_proj.named(&format!("{n}.mlp.c_proj")));
        }
        v.extend(self.ln_f.named_parameters().into_iter().map(|(k, var)| (format!("{p}ln_f.{k}"), var)));
        v
    }
}
