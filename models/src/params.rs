//! A model's parameter tree built once for both ways a model is made (as candle's
//! `VarBuilder`): read from a checkpoint, placed on a device or split over a mesh as each
//! tensor is read, or made fresh for training from scratch (weights N(0, 0.02) as transformers'
//! `_init_weights`, biases zeros, norms at their identity). A family walks its tree once with
//! [`Params::pp`] for each level of Hugging Face's dotted names.

use eager::nn::{Embedding, LayerNorm, Linear, RmsNorm};
use eager::{DType, Tensor, Var};

use crate::weights::{Placement, Weights};
use crate::Result;

/// Where the parameters come from.
#[derive(Clone, Copy)]
enum Source<'a> {
    /// A checkpoint's tensors, placed as they are read.
    Checkpoint(&'a Weights, &'a Placement),
    /// Fresh values.
    Fresh,
}

/// What a fresh tensor starts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Init {
    /// N(0, 0.02), drawn in f32 and cast (transformers' `initializer_range`).
    Normal,
    /// Ones (a norm's scale).
    Ones,
    /// Zeros (a bias; Gemma's `1 + weight` norms).
    Zeros,
}

/// The parameters under one prefix of a model's tree, in one dtype.
#[derive(Clone)]
pub struct Params<'a> {
    source: Source<'a>,
    dtype: DType,
    prefix: String,
}

impl<'a> Params<'a> {
    /// A checkpoint's tensors in `dtype`, placed by `placement`.
    pub fn checkpoint(w: &'a Weights, placement: &'a Placement, dtype: DType) -> Params<'a> {
        Params { source: Source::Checkpoint(w, placement), dtype, prefix: String::new() }
    }

    /// Fresh tensors in `dtype`.
    pub fn fresh(dtype: DType) -> Params<'a> {
        Params { source: Source::Fresh, dtype, prefix: String::new() }
    }

    /// The parameters under `name` (`pp("model").pp("layers.0")`).
    pub fn pp(&self, name: &str) -> Params<'a> {
        let prefix =
            if self.prefix.is_empty() { name.to_string() } else { format!("{}.{name}", self.prefix) };
        Params { prefix, ..self.clone() }
    }

    /// The dotted prefix here (`model.layers.0`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The dtype the parameters are made in.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The full dotted name of `name` here.
    pub fn name(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.prefix)
        }
    }

    /// The checkpoint and placement, when reading one.
    pub fn checkpoint_source(&self) -> Option<(&'a Weights, &'a Placement)> {
        match self.source {
            Source::Checkpoint(w, p) => Some((w, p)),
            Source::Fresh => None,
        }
    }

    /// Whether the checkpoint holds `name` here (never, for fresh parameters).
    pub fn contains(&self, name: &str) -> bool {
        self.checkpoint_source().is_some_and(|(w, _)| w.contains(&self.name(name)))
    }

    /// Tensor `name` of `shape`: read (split along dim `split` over a mesh), or fresh as `init`.
    pub fn tensor(&self, name: &str, shape: &[usize], init: Init, split: Option<usize>) -> Result<Tensor> {
        Ok(match self.source {
            Source::Checkpoint(w, placement) => {
                w.get_placed(&self.name(name), shape, self.dtype, placement, split)?
            }
            Source::Fresh => match init {
                Init::Normal => Tensor::randn(shape, DType::F32)?.mul_scalar(0.02)?.to_dtype(self.dtype)?,
                Init::Ones => Tensor::ones(shape, self.dtype)?,
                Init::Zeros => Tensor::zeros(shape, self.dtype)?,
            },
        })
    }

    /// The tensors `name(0)`, …, `name(count - 1)` (each of `shape`) stacked into one
    /// `[count, shape..]` parameter named `var_name`: read and joined on the host, then placed
    /// (split along dim `split` over a mesh), or fresh as `init`.
    pub fn stacked(
        &self,
        var_name: &str,
        name: impl Fn(usize) -> String,
        count: usize,
        shape: &[usize],
        init: Init,
        split: Option<usize>,
    ) -> Result<Var> {
        let all: Vec<usize> = std::iter::once(count).chain(shape.iter().copied()).collect();
        let t = match self.source {
            Source::Checkpoint(w, placement) => {
                let mut bytes = Vec::new();
                for i in 0..count {
                    bytes.extend_from_slice(&w.bytes(&self.name(&name(i)), shape, self.dtype)?);
                }
                placement.place(&bytes, &all, self.dtype, split)?
            }
            Source::Fresh => Params::fresh(self.dtype).tensor("", &all, init, None)?,
        };
        Ok(Var::parameter(var_name, t)?)
    }

    /// [`Params::tensor`] as a parameter named by its last dotted part.
    pub fn var(&self, name: &str, shape: &[usize], init: Init, split: Option<usize>) -> Result<Var> {
        let t = self.tensor(name, shape, init, split)?;
        Ok(Var::parameter(name.rsplit('.').next().unwrap_or(name), t)?)
    }

    /// A Linear `inp -> out` (`name.weight` `[out, inp]`, `name.bias` if `bias`), split over a
    /// mesh by output rows (`split` 0, the bias with them) or input columns (1).
    pub fn linear(&self, name: &str, out: usize, inp: usize, bias: bool, split: usize) -> Result<Linear> {
        let p = self.pp(name);
        let weight = p.var("weight", &[out, inp], Init::Normal, Some(split))?;
        let bias =
            if bias { Some(p.var("bias", &[out], Init::Zeros, (split == 0).then_some(0))?) } else { None };
        Ok(Linear { weight, bias })
    }

    /// An embedding table `name.weight` `[rows, dim]`, split over a mesh by its rows (the vocabulary).
    pub fn embedding(&self, name: &str, rows: usize, dim: usize) -> Result<Embedding> {
        Ok(Embedding { weight: self.pp(name).var("weight", &[rows, dim], Init::Normal, Some(0))? })
    }

    /// A LayerNorm over `dim` (`name.weight`, `name.bias`, whole on every device), fresh at its
    /// identity (scale ones, shift zeros).
    pub fn layer_norm(&self, name: &str, dim: usize, eps: f64) -> Result<LayerNorm> {
        let p = self.pp(name);
        let weight = p.var("weight", &[dim], Init::Ones, None)?;
        Ok(LayerNorm { weight, bias: p.var("bias", &[dim], Init::Zeros, None)?, eps })
    }

    /// An RMSNorm over `dim` (`name.weight`, whole on every device) scaling by `offset + weight`.
    pub fn rms_norm(&self, name: &str, dim: usize, eps: f64, offset: f64) -> Result<RmsNorm> {
        let init = if offset == 0.0 { Init::Ones } else { Init::Zeros };
        Ok(RmsNorm { weight: self.pp(name).var("weight", &[dim], init, None)?, eps, offset })
    }
}
