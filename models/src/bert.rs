//! BERT as an encoder (`BertModel`'s `last_hidden_state`, for embeddings): word, position and
//! token-type embeddings, post-norm layers of bidirectional attention under a padding mask,
//! exact GELU. Tensors named `embeddings.…`/`encoder.layer.0.…` (as fresh models are), or under
//! `bert.` as a task model saves them; the pooler, when present, is not used. The tree is
//! walked once through [`Params`], for loading (on a device, or split over a mesh as Megatron
//! splits it) and fresh weights; the attention, MLP and post-norm residual are `layers`' shared
//! pieces.

use eager::nn::{AttentionOptions, Embedding, LayerNorm, Module};
use eager::{DType, Device, Tensor, Var};

use crate::config::Config;
use crate::layers::{prefixed, GeluKind, GeluMlp, NormLayout, Qkv, SelfAttention};
use crate::params::Params;
use crate::weights::{Placement, Weights};
use crate::{ModelError, Result};

/// One encoder layer (post-norm): self-attention, add and norm, then the GELU MLP, add and norm.
pub struct BertLayer {
    /// The attention: `attention.self.query`, `key`, `value`, the output `attention.output.dense`.
    pub attention: SelfAttention,
    /// The norm after the attention's residual (`attention.output.LayerNorm`).
    pub attention_norm: LayerNorm,
    /// The MLP: `intermediate.dense`, then `output.dense`.
    pub mlp: GeluMlp,
    /// The norm after the MLP's residual (`output.LayerNorm`).
    pub output_norm: LayerNorm,
}

/// BERT's encoder (`BertModel`): embeddings, then the layers; `last_hidden_state` out, no pooler.
pub struct Bert {
    /// The checkpoint's configuration.
    pub config: Config,
    /// `"bert."` or `""`, as the checkpoint named its tensors (saved back the same way).
    pub prefix: String,
    /// Token embeddings (`embeddings.word_embeddings`).
    pub word_embeddings: Embedding,
    /// Learned position embeddings.
    pub position_embeddings: Embedding,
    /// Segment (token type) embeddings.
    pub token_type_embeddings: Embedding,
    /// The norm after the three embeddings are summed.
    pub embeddings_norm: LayerNorm,
    /// The encoder layers, in order.
    pub layers: Vec<BertLayer>,
}

impl Bert {
    /// Builds the encoder from `w` (tensors cast to `dtype`, uploaded to `device`), checking each against `cfg`.
    pub fn load(cfg: &Config, w: &Weights, dtype: DType, device: Device) -> Result<Bert> {
        Bert::load_placed(cfg, w, dtype, &Placement::Device(device))
    }

    /// [`Bert::load`] with each weight placed as `placement` says: over a mesh, query, key,
    /// value and `intermediate.dense` split by output rows, `attention.output.dense` and
    /// `output.dense` by input columns, the embedding tables by rows (a table whose row count
    /// the axis does not divide, such as the 2 token types, whole), norms whole.
    pub fn load_placed(cfg: &Config, w: &Weights, dtype: DType, placement: &Placement) -> Result<Bert> {
        Bert::build(cfg, &Params::checkpoint(w, placement, dtype))
    }

    /// A freshly initialised encoder of `cfg` (weights N(0, 0.02), biases zeros, norms at their
    /// identity), named as `BertModel` saves it.
    pub fn new(cfg: &Config, dtype: DType) -> Result<Bert> {
        Bert::build(cfg, &Params::fresh(dtype))
    }

    /// The encoder's tree, walked once under Hugging Face's names: read or fresh as `params` is.
    fn build(cfg: &Config, params: &Params) -> Result<Bert> {
        let act = GeluKind::of(cfg, "BERT")?;
        let tagged = params.contains("bert.embeddings.word_embeddings.weight");
        let (root, prefix) = if tagged { (params.pp("bert"), "bert.") } else { (params.clone(), "") };
        let (d, inner, heads) = (cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads);
        let (col, row) = (0, 1);
        let ln = |p: &Params, name: &str| p.layer_norm(name, d, cfg.norm_eps);
        let emb = root.pp("embeddings");
        let word_embeddings = emb.embedding("word_embeddings", cfg.vocab_size, d)?;
        let position_embeddings = emb.embedding("position_embeddings", cfg.max_position_embeddings, d)?;
        let token_type_embeddings = emb.embedding("token_type_embeddings", cfg.type_vocab_size, d)?;
        let embeddings_norm = ln(&emb, "LayerNorm")?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|l| {
                let layer = root.pp(&format!("encoder.layer.{l}"));
                let (attn, out) = (layer.pp("attention.self"), layer.pp("attention.output"));
                Ok(BertLayer {
                    attention: SelfAttention {
                        qkv: Qkv::Separate([
                            attn.linear("query", d, d, true, col)?,
                            attn.linear("key", d, d, true, col)?,
                            attn.linear("value", d, d, true, col)?,
                        ]),
                        out: out.linear("dense", d, d, true, row)?,
                        heads,
                        head_dim: d / heads,
                    },
                    attention_norm: ln(&out, "LayerNorm")?,
                    mlp: GeluMlp {
                        up: layer.linear("intermediate.dense", inner, d, true, col)?,
                        down: layer.linear("output.dense", d, inner, true, row)?,
                        act,
                    },
                    output_norm: ln(&layer, "output.LayerNorm")?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Bert {
            config: cfg.clone(),
            prefix: prefix.to_string(),
            word_embeddings,
            position_embeddings,
            token_type_embeddings,
            embeddings_norm,
            layers,
        })
    }

    /// `last_hidden_state` `[B, T, hidden]` of ids `[B, T]`; `attention_mask` `[B, T]` (1 for
    /// tokens, 0 for padding), `token_type_ids` `[B, T]` (zeros when not given).
    pub fn encode(
        &self,
        ids: &Tensor,
        attention_mask: Option<&Tensor>,
        token_type_ids: Option<&Tensor>,
    ) -> Result<Tensor> {
        if ids.rank() != 2 {
            return Err(ModelError::Generate(format!("BERT ids must be [B, T], got {}", ids.spec())));
        }
        let (b, t) = (ids.shape()[0], ids.shape()[1]);
        let dev = ids.device();
        let positions =
            Tensor::arange_on(0.0, t as f64, 1.0, DType::I64, dev)?.unsqueeze(0)?.broadcast_to(&[b, t])?;
        let types = match token_type_ids {
            Some(tt) => tt.clone(),
            None => Tensor::full_on(&[b, t], 0.0, DType::I64, dev)?,
        };
        let x = self
            .word_embeddings
            .lookup(ids)?
            .add(&self.position_embeddings.lookup(&positions)?)?
            .add(&self.token_type_embeddings.lookup(&types)?)?;
        let mut x = self.embeddings_norm.forward(&x)?;
        let mask = match attention_mask {
            Some(m) => Some(m.ne_scalar(0.0)?.reshape(&[b as isize, 1, 1, t as isize])?),
            None => None,
        };
        for l in &self.layers {
            let opts = AttentionOptions { mask: mask.as_ref(), ..Default::default() };
            x = NormLayout::Post { attn: &l.attention_norm, mlp: &l.output_norm }.apply(
                &x,
                |x| l.attention.forward_with(x, None, opts, None),
                |x| l.mlp.forward(x),
            )?;
        }
        Ok(x)
    }
}

impl Module for Bert {
    fn forward(&self, ids: &Tensor) -> eager::Result<Tensor> {
        self.encode(ids, None, None).map_err(|e| crate::to_eager("Bert", e))
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        let p = &self.prefix;
        let mut v = Vec::new();
        let embeddings = [
            ("word_embeddings", self.word_embeddings.named_parameters()),
            ("position_embeddings", self.position_embeddings.named_parameters()),
            ("token_type_embeddings", self.token_type_embeddings.named_parameters()),
            ("LayerNorm", self.embeddings_norm.named_parameters()),
        ];
        for (name, params) in embeddings {
            v.extend(prefixed(&format!("{p}embeddings.{name}"), params));
        }
        for (i, l) in self.layers.iter().enumerate() {
            let q = format!("{p}encoder.layer.{i}");
            let names = [
                "attention.self.query",
                "attention.self.key",
                "attention.self.value",
                "attention.output.dense",
            ];
            v.extend(prefixed(&q, l.attention.named_parameters(&names)));
            v.extend(prefixed(
                &format!("{q}.attention.output.LayerNorm"),
                l.attention_norm.named_parameters(),
            ));
            v.extend(prefixed(&q, l.mlp.named_parameters(["intermediate.dense", "output.dense"])));
            v.extend(prefixed(&format!("{q}.output.LayerNorm"), l.output_norm.named_parameters()));
        }
        v
    }
}
