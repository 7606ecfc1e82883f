//! GPT-2: learned positions, LayerNorm, `gelu_new` (the tanh approximation), `Conv1D`
//! projections whose weights are stored `[in, out]` (kept so, under their names), and the
//! output head tied to the token embedding. Checkpoints name tensors `transformer.h.0.…`
//! (saved by `GPT2LMHeadModel`, and fresh models) or `h.0.…` (the original `gpt2` on the
//! Hub): both load. The tree is walked once through [`Params`], for loading and fresh weights;
//! over a mesh `c_attn` and `c_fc` split by their outputs, both `c_proj` by their inputs.

use eager::nn::{AttentionOptions, Embedding, LayerNorm, Module, StaticKvCache};
use eager::{DType, Device, Tensor, Var};

use crate::config::Config;
use crate::generate::CausalLm;
use crate::layers::{prefixed, GeluKind, GeluMlp, NormLayout, Qkv, SelfAttention};
use crate::params::{Init, Params};
use crate::weights::{Placement, Weights};
use crate::Result;

/// `y = x W + b` with `W` `[in, out]` (transformers' `Conv1D`).
pub struct Conv1D {
    /// `W`, `[in, out]`.
    pub weight: Var,
    /// `b`, `[out]`.
    pub bias: Var,
}

/// How a [`Conv1D`] splits over a mesh (Megatron's parallel layers).
#[derive(Clone, Copy)]
enum Split {
    /// By outputs (`W`'s columns, `b` with them): column-parallel.
    Out,
    /// By inputs (`W`'s rows; `b` whole, added once the partial products are summed): row-parallel.
    In,
}

impl Conv1D {
    /// `name.weight` `[inp, out]` and `name.bias` under `p`, read (split as `split` says over a
    /// mesh) or fresh.
    fn build(p: &Params, name: &str, inp: usize, out: usize, split: Split) -> Result<Conv1D> {
        let p = p.pp(name);
        let (w_dim, b_dim) = match split {
            Split::Out => (1, Some(0)),
            Split::In => (0, None),
        };
        let weight = p.var("weight", &[inp, out], Init::Normal, Some(w_dim))?;
        Ok(Conv1D { weight, bias: p.var("bias", &[out], Init::Zeros, b_dim)? })
    }
}

impl Module for Conv1D {
    fn forward(&self, x: &Tensor) -> eager::Result<Tensor> {
        let w = self.weight.get();
        let (inp, out) = (w.shape()[0] as isize, w.shape()[1] as isize);
        let mut shape: Vec<isize> = x.shape()[..x.rank() - 1].iter().map(|&d| d as isize).collect();
        shape.push(out);
        x.reshape(&[-1, inp])?.matmul(&w)?.add(&self.bias.get())?.reshape(&shape)
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        vec![("weight".into(), self.weight.clone()), ("bias".into(), self.bias.clone())]
    }
}

/// One GPT-2 block: pre-norm attention, then pre-norm GELU MLP, each added to the residual.
pub struct Gpt2Block {
    /// The norm before attention.
    pub ln_1: LayerNorm,
    /// The attention: q, k and v in one `attn.c_attn`, the output `attn.c_proj`.
    pub attn: SelfAttention<Conv1D>,
    /// The norm before the MLP.
    pub ln_2: LayerNorm,
    /// The MLP: `mlp.c_fc`, then `mlp.c_proj`.
    pub mlp: GeluMlp<Conv1D>,
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
        Gpt2::load_placed(cfg, w, dtype, &Placement::Device(device))
    }

    /// [`Gpt2::load`] with each weight placed as `placement` says: over a mesh, `c_attn` and
    /// `c_fc` split by output columns (their `[in, out]` weights' dim 1), both `c_proj` by input
    /// rows, the token and position embeddings by rows (the tied head with them), norms whole.
    pub fn load_placed(cfg: &Config, w: &Weights, dtype: DType, placement: &Placement) -> Result<Gpt2> {
        Gpt2::build(cfg, &Params::checkpoint(w, placement, dtype))
    }

    /// A freshly initialised model of `cfg` (weights N(0, 0.02), biases zeros, norms at their
    /// identity), named as `GPT2LMHeadModel` saves it (`transformer.…`).
    pub fn new(cfg: &Config, dtype: DType) -> Result<Gpt2> {
        Gpt2::build(cfg, &Params::fresh(dtype))
    }

    /// The model's tree, walked once under Hugging Face's names: read or fresh as `params` is.
    fn build(cfg: &Config, params: &Params) -> Result<Gpt2> {
        let act = GeluKind::of(cfg, "GPT-2")?;
        let bare = params.contains("wte.weight") && !params.contains("transformer.wte.weight");
        let (root, prefix) =
            if bare { (params.clone(), "") } else { (params.pp("transformer"), "transformer.") };
        let (d, inner, heads) = (cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads);
        let ln = |p: &Params, name: &str| p.layer_norm(name, d, cfg.norm_eps);
        let wte = root.embedding("wte", cfg.vocab_size, d)?;
        let wpe = root.embedding("wpe", cfg.max_position_embeddings, d)?;
        let h = (0..cfg.num_hidden_layers)
            .map(|l| {
                let blk = root.pp(&format!("h.{l}"));
                let (attn, mlp) = (blk.pp("attn"), blk.pp("mlp"));
                Ok(Gpt2Block {
                    ln_1: ln(&blk, "ln_1")?,
                    attn: SelfAttention {
                        qkv: Qkv::Fused(Conv1D::build(&attn, "c_attn", d, 3 * d, Split::Out)?),
                        out: Conv1D::build(&attn, "c_proj", d, d, Split::In)?,
                        heads,
                        head_dim: d / heads,
                    },
                    ln_2: ln(&blk, "ln_2")?,
                    mlp: GeluMlp {
                        up: Conv1D::build(&mlp, "c_fc", d, inner, Split::Out)?,
                        down: Conv1D::build(&mlp, "c_proj", inner, d, Split::In)?,
                        act,
                    },
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Gpt2 {
            config: cfg.clone(),
            prefix: prefix.to_string(),
            wte,
            wpe,
            h,
            ln_f: ln(&root, "ln_f")?,
            dtype: params.dtype(),
        })
    }
}

impl CausalLm for Gpt2 {
    fn config(&self) -> &Config {
        &self.config
    }

    fn new_cache(&self, batch: usize, capacity: usize) -> Result<Vec<StaticKvCache>> {
        let dev = self.wte.weight.get().device();
        self.h.iter().map(|b| b.attn.new_cache(batch, capacity, self.dtype, dev)).collect()
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
        let d = self.config.hidden_size;
        for (i, blk) in self.h.iter().enumerate() {
            let layer_cache = cache.as_mut().map(|(c, start)| (&mut c[i], *start));
            let opts = AttentionOptions::causal_under(Some(mask));
            x = NormLayout::Pre { attn: &blk.ln_1, mlp: &blk.ln_2 }.apply(
                &x,
                |x| blk.attn.forward_with(x, None, opts, layer_cache),
                |x| blk.mlp.forward(x),
            )?;
        }
        let x = self.ln_f.forward(&x)?;
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
            v.extend(prefixed(&format!("{n}.ln_1"), blk.ln_1.named_parameters()));
            v.extend(prefixed(&n, blk.attn.named_parameters(&["attn.c_attn", "attn.c_proj"])));
            v.extend(prefixed(&format!("{n}.ln_2"), blk.ln_2.named_parameters()));
            v.extend(prefixed(&n, blk.mlp.named_parameters(["mlp.c_fc", "mlp.c_proj"])));
        }
        v.extend(prefixed(&format!("{p}ln_f"), self.ln_f.named_parameters()));
        v
    }
}
