//! The three models `eager-bench` trains (its `train_mlp`, `train_cnn`, `train_gpt`), written
//! once for the tests and examples that need them whole: `#[path]`-included by
//! `tests/autocast_models.rs` (against torch under bf16 autocast) and
//! `examples/autocast_bench.rs` (steps/s and activation bytes, f32 against bf16 autocast).
//! Parameter names are torch's for the same modules (`0.weight`, `blocks.1.attn.in_proj.bias`,
//! …), so weights saved from here load into `tests/reference/autocast_models_reference.py`.
//! Initialised from `manual_seed(1)` with eager's initialisers, as `eager-bench` does.

// Each includer uses a part of this module.
#![allow(dead_code)]

use eager::nn::{
    self, Conv2d, Embedding, Flatten, LayerNorm, Linear, MaxPool2d, Module, Relu, Sequential,
    TransformerBlock,
};
use eager::prelude::*;

/// The MLP 784-256-10 (SGD, momentum 0.9, lr 0.05 in the bench).
pub struct Mlp {
    pub model: Sequential,
}

impl Mlp {
    pub fn new() -> Result<Mlp> {
        manual_seed(1);
        Ok(Mlp { model: Sequential::new().add(Linear::new(784, 256)?).add(Relu).add(Linear::new(256, 10)?) })
    }

    /// Mean cross-entropy of `x` `[B, 784]` against classes `y` `[B]`.
    pub fn loss(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        nn::cross_entropy(&self.model.forward(x)?, y)
    }

    pub fn named_parameters(&self) -> Vec<(String, Var)> {
        self.model.named_parameters()
    }
}

/// The digits CNN of notebook 05: conv 3x3 1->16 pad 1, relu, max-pool 2, conv 3x3 16->32
/// pad 1, relu, max-pool 2, flatten, linear 128->10, on `[B, 1, 8, 8]` (SGD, momentum 0.9,
/// lr 0.05 in the bench).
pub struct Cnn {
    pub model: Sequential,
}

impl Cnn {
    pub fn new() -> Result<Cnn> {
        manual_seed(1);
        let conv = |i, o| Conv2d::with_options(i, o, [3, 3], [1, 1], 1.into(), [1, 1], 1, true, DType::F32);
        let model = Sequential::new()
            .add(conv(1, 16)?)
            .add(Relu)
            .add(MaxPool2d::new([2, 2]))
            .add(conv(16, 32)?)
            .add(Relu)
            .add(MaxPool2d::new([2, 2]))
            .add(Flatten)
            .add(Linear::new(128, 10)?);
        Ok(Cnn { model })
    }

    /// The class scores `[B, 10]` of images `x` `[B, 1, 8, 8]`.
    pub fn logits(&self, x: &Tensor) -> Result<Tensor> {
        self.model.forward(x)
    }

    /// Mean cross-entropy of `logits` against classes `y` `[B]`.
    pub fn loss_of(&self, logits: &Tensor, y: &Tensor) -> Result<Tensor> {
        nn::cross_entropy(logits, y)
    }

    pub fn loss(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        self.loss_of(&self.logits(x)?, y)
    }

    pub fn named_parameters(&self) -> Vec<(String, Var)> {
        self.model.named_parameters()
    }
}

pub const GPT_VOCAB: usize = 64;
pub const GPT_CONTEXT: usize = 32;
pub const GPT_WIDTH: usize = 64;
pub const GPT_HEADS: usize = 4;

/// The character GPT of notebook 06: vocabulary 64, context 32, width 64, 4 heads, 2 pre-norm
/// blocks (one qkv projection, causal, exact-GELU MLP of 4x), learned token and position
/// embeddings, a final LayerNorm, a linear head (AdamW lr 3e-3, weight decay 0.01 in the
/// bench).
pub struct Gpt {
    pub tokens: Embedding,
    pub positions: Embedding,
    pub blocks: Vec<TransformerBlock>,
    pub norm: LayerNorm,
    pub head: Linear,
    place: Tensor,
}

impl Gpt {
    pub fn new() -> Result<Gpt> {
        manual_seed(1);
        Ok(Gpt {
            tokens: Embedding::new(GPT_VOCAB, GPT_WIDTH)?,
            positions: Embedding::new(GPT_CONTEXT, GPT_WIDTH)?,
            blocks: vec![
                TransformerBlock::new(GPT_WIDTH, GPT_HEADS)?,
                TransformerBlock::new(GPT_WIDTH, GPT_HEADS)?,
            ],
            norm: LayerNorm::new(GPT_WIDTH)?,
            head: Linear::new(GPT_WIDTH, GPT_VOCAB)?,
            place: Tensor::arange(0.0, GPT_CONTEXT as f64, 1.0, DType::I64)?,
        })
    }

    /// The next-token scores `[B, 32, 64]` of tokens `x` `[B, 32]`.
    pub fn logits(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = self.tokens.forward(x)?.add(&self.positions.forward(&self.place)?)?;
        for b in &self.blocks {
            h = b.forward(&h)?;
        }
        self.head.forward(&self.norm.forward(&h)?)
    }

    /// Mean cross-entropy over every position of `logits` against the next tokens `y`
    /// `[B, 32]`.
    pub fn loss_of(&self, logits: &Tensor, y: &Tensor) -> Result<Tensor> {
        nn::cross_entropy(&logits.reshape(&[-1, GPT_VOCAB as isize])?, &y.reshape(&[-1])?)
    }

    pub fn loss(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        self.loss_of(&self.logits(x)?, y)
    }

    pub fn named_parameters(&self) -> Vec<(String, Var)> {
        let with = |prefix: &str, m: &dyn Module| -> Vec<(String, Var)> {
            m.named_parameters().into_iter().map(|(n, v)| (format!("{prefix}.{n}"), v)).collect()
        };
        let mut v = with("tok", &self.tokens);
        v.extend(with("pos", &self.positions));
        for (i, b) in self.blocks.iter().enumerate() {
            v.extend(with(&format!("blocks.{i}"), b));
        }
        v.extend(with("norm", &self.norm));
        v.extend(with("head", &self.head));
        v
    }
}

/// A small deterministic generator (64-bit LCG, the top bits), the same on every run, for
/// data the torch reference reads from a file rather than redraws.
pub struct Lcg(u64);

impl Lcg {
    pub fn new(seed: u64) -> Lcg {
        Lcg(seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407))
    }

    /// The next value in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The next value in 0..n.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_f64() * n as f64) as usize % n
    }
}

/// `steps` batches of `batch` CNN images `[steps, batch, 1, 8, 8]` (flat) and their classes
/// `[steps, batch]`: class c lights the pixels whose index is c mod 10 (by 2) over a noise of 0.5,
/// so that the CNN has something to learn.
pub fn cnn_batches(steps: usize, batch: usize, seed: u64) -> (Vec<f32>, Vec<i64>) {
    let mut rng = Lcg::new(seed);
    let (mut x, mut y) = (Vec::with_capacity(steps * batch * 64), Vec::with_capacity(steps * batch));
    for _ in 0..steps * batch {
        let c = rng.below(10);
        y.push(c as i64);
        x.extend((0..64).map(|p| (0.5 * rng.next_f64() + if p % 10 == c { 2.0 } else { 0.0 }) as f32));
    }
    (x, y)
}

/// `steps` batches of `batch` windows of a token stream `[steps, batch, 32]` (flat) and the
/// next tokens: the stream steps `t -> 5 t + 3 (+1 a third of the time) mod 64`, so that the
/// GPT has bigrams to learn.
pub fn gpt_batches(steps: usize, batch: usize, seed: u64) -> (Vec<i64>, Vec<i64>) {
    let mut rng = Lcg::new(seed);
    let (mut x, mut y) = (vec![], vec![]);
    for _ in 0..steps * batch {
        let mut t = rng.below(GPT_VOCAB);
        for _ in 0..GPT_CONTEXT {
            x.push(t as i64);
            t = (5 * t + 3 + usize::from(rng.below(3) == 0)) % GPT_VOCAB;
            y.push(t as i64);
        }
    }
    (x, y)
}
