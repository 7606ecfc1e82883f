//! BERT as an encoder (`BertModel`'s `last_hidden_state`, for embeddings): word, position and
//! token-type embeddings, post-norm layers of bidirectional attention under a padding mask,
//! exact GELU. Tensors named `embeddings.…`/`encoder.layer.0.…`, or under `bert.` as a task
//! model saves them; the pooler, when present, is not used.

use eager::nn::{
    attend_heads, gelu_exact, merge_heads, split_heads, AttentionOptions, Embedding, LayerNorm, Linear,
    Module,
};
use eager::{DType, Device, Tensor, Var};

use crate::config::Config;
use crate::weights::Weights;
use crate::{ModelError, Result};

/// One encoder layer (post-norm): self-attention, add and norm, then the GELU MLP, add and norm.
pub struct BertLayer {
    /// The query projection (`attention.self.query`).
    pub query: Linear,
    /// The key projection (`attention.self.key`).
    pub key: Linear,
    /// The value projection (`attention.self.value`).
    pub value: Linear,
    /// The attention's output projection (`attention.output.dense`).
    pub attention_output: Linear,
    /// The norm after the attention's residual (`attention.output.LayerNorm`).
    pub attention_norm: LayerNorm,
    /// The MLP's first projection (`intermediate.dense`).
    pub intermediate: Linear,
    /// The MLP's second projection (`output.dense`).
    pub output: Linear,
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
        if cfg.hidden_act != "gelu" {
            return Err(ModelError::Unsupported(format!("BERT activation `{}` (only gelu)", cfg.hidden_act)));
        }
        let prefix = if w.contains("bert.embeddings.word_embeddings.weight") { "bert." } else { "" };
        let (d, inner) = (cfg.hidden_size, cfg.intermediate_size);
        let param = |name: &str, shape: &[usize]| -> Result<Var> {
            Ok(Var::parameter(
                name.rsplit('.').next().unwrap_or(name),
                w.get(&format!("{prefix}{name}"), shape, dtype, device)?,
            )?)
        };
        let linear = |name: &str, out: usize, inp: usize| -> Result<Linear> {
            Ok(Linear {
                weight: param(&format!("{name}.weight"), &[out, inp])?,
                bias: Some(param(&format!("{name}.bias"), &[out])?),
            })
        };
        let ln = |name: &str| -> Result<LayerNorm> {
            Ok(LayerNorm {
                weight: param(&format!("{name}.weight"), &[d])?,
                bias: param(&format!("{name}.bias"), &[d])?,
                eps: cfg.norm_eps,
            })
        };
        let layers = (0..cfg.num_hidden_layers)
            .map(|l| {
                let p = format!("encoder.layer.{l}");
                Ok(BertLayer {
                    query: linear(&format!("{p}.attention.self.query"), d, d)?,
                    key: linear(&format!("{p}.attention.self.key"), d, d)?,
                    value: linear(&format!("{p}.attention.self.value"), d, d)?,
                    attention_output: linear(&format!("{p}.attention.output.dense"), d, d)?,
                    attention_norm: ln(&format!("{p}.attention.output.LayerNorm"))?,
                    intermediate: linear(&format!("{p}.intermediate.dense"), inner, d)?,
                    output: linear(&format!("{p}.output.dense"), d, inner)?,
                    output_norm: ln(&format!("{p}.output.LayerNorm"))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Bert {
            config: cfg.clone(),
            prefix: prefix.to_string(),
            word_embeddings: Embedding {
                weight: param("embeddings.word_embeddings.weight", &[cfg.vocab_size, d])?,
            },
            position_embeddings: Embedding {
                weight: param("embeddings.position_embeddings.weight", &[cfg.max_position_embeddings, d])?,
            },
            token_type_embeddings: Embedding {
                weight: param("embeddings.token_type_embeddings.weight", &[cfg.type_vocab_size, d])?,
            },
            embeddings_norm: ln("embeddings.LayerNorm")?,
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
        let heads = self.config.num_attention_heads;
        for l in &self.layers {
            let split = |p: &Linear| split_heads(&p.forward(&x)?, heads);
            let (q, k, v) = (split(&l.query)?, split(&l.key)?, split(&l.value)?);
            let a = attend_heads(
                &q,
                &k,
                &v,
                AttentionOptions { mask: mask.as_ref(), ..Default::default() },
                None,
            )?;
            let a = l.attention_output.forward(&merge_heads(&a)?)?;
            x = l.attention_norm.forward(&a.add(&x)?)?;
            let m = l.output.forward(&gelu_exact(&l.intermediate.forward(&x)?)?)?;
            x = l.output_norm.forward(&m.add(&x)?)?;
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
        let mut add = |name: String, params: Vec<(String, Var)>| {
            v.extend(params.into_iter().map(|(n, var)| (format!("{p}{name}.{n}"), var)))
        };
        add("embeddings.word_embeddings".into(), self.word_embeddings.named_parameters());
        add("embeddings.position_embeddings".into(), self.position_embeddings.named_parameters());
        add("embeddings.token_type_embeddings".into(), self.token_type_embeddings.named_parameters());
        add("embeddings.LayerNorm".into(), self.embeddings_norm.named_parameters());
        for (i, l) in self.layers.iter().enumerate() {
            let q = format!("encoder.layer.{i}");
            add(format!("{q}.attention.self.query"), l.query.named_parameters());
            add(format!("{q}.attention.self.key"), l.key.named_parameters());
            add(format!("{q}.attention.self.value"), l.value.named_parameters());
            add(format!("{q}.attention.output.dense"), l.attention_output.named_parameters());
            add(format!("{q}.attention.output.LayerNorm"), l.attention_norm.named_parameters());
            add(format!("{q}.intermediate.dense"), l.intermediate.named_parameters());
            add(format!("{q}.output.dense"), l.output.named_parameters());
            add(format!("{q}.output.LayerNorm"), l.output_norm.named_parameters());
        }
        v
    }
}
