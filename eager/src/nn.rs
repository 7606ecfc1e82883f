//! Neural-network layers, activations and losses, composed from the eager ops (as torch.nn).
//! Layers keep their weights in [`Var`]s, so an optimizer can update them and a compiled
//! training step reads and writes them.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::Padding;
use crate::tensor::Tensor;
use crate::var::Var;

/// A layer or a model: a forward function and the parameters it trains.
pub trait Module {
    fn forward(&self, x: &Tensor) -> Result<Tensor>;

    /// Every parameter with its dotted path (`0.weight`, `fc2.bias`, …).
    fn named_parameters(&self) -> Vec<(String, Var)>;

    /// Every parameter, in [`Module::named_parameters`] order.
    fn parameters(&self) -> Vec<Var> {
        self.named_parameters().into_iter().map(|(_, v)| v).collect()
    }

    /// State that is saved and loaded with the parameters but takes no gradient (batch norm's
    /// running statistics), with dotted paths as for parameters.
    fn named_buffers(&self) -> Vec<(String, Var)> {
        Vec::new()
    }

    /// Training or evaluation mode (dropout and batch norm care). A mode is read when a
    /// compiled function is traced: compile the training step and the evaluation separately.
    fn set_training(&self, _on: bool) {}

    /// Training mode (as torch's `model.train()`): dropout drops, batch norm uses and updates
    /// batch statistics.
    fn train(&self) {
        self.set_training(true)
    }

    /// Evaluation mode (as torch's `model.eval()`): dropout is the identity, batch norm uses
    /// its running statistics.
    fn eval(&self) {
        self.set_training(false)
    }
}

/// A sub-module's parameters or buffers under `prefix.`.
fn prefixed(prefix: &str, named: Vec<(String, Var)>) -> Vec<(String, Var)> {
    named.into_iter().map(|(n, v)| (format!("{prefix}.{n}"), v)).collect()
}

/// The named values of a module's parameters, for saving (`eager::io::save_safetensors`).
/// Parameters then buffers, as torch's `state_dict`.
pub fn state_dict(m: &dyn Module) -> Vec<(String, Tensor)> {
    m.named_parameters().into_iter().chain(m.named_buffers()).map(|(n, v)| (n, v.get().detach())).collect()
}

/// Sets a module's parameters from named values (as loaded from a file); every parameter
/// and buffer must be present with its shape and dtype.
pub fn load_state_dict(m: &dyn Module, values: &[(String, Tensor)]) -> Result<()> {
    for (name, var) in m.named_parameters().into_iter().chain(m.named_buffers()) {
        let (_, t) = values
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| Error::invalid("load_state_dict", format!("no value for parameter {name}")))?;
        let want = var.get();
        if t.spec() != want.spec() {
            return Err(Error::shape(
                "load_state_dict",
                format!("{name} is {}, the value given is {}", want.spec(), t.spec()),
            ));
        }
        var.set(t.clone())?;
    }
    Ok(())
}

/// Uniform on [-bound, bound), as torch initialises linear layers.
fn uniform(shape: &[usize], bound: f64, dtype: DType) -> Result<Tensor> {
    Tensor::rand(shape, dtype)?.mul_scalar(2.0 * bound)?.sub_scalar(bound)
}

/// `y = x Wᵀ + b`, weight `[out, in]`, initialised as torch does (uniform ±1/√in).
pub struct Linear {
    pub weight: Var,
    pub bias: Option<Var>,
}

impl Linear {
    pub fn new(inputs: usize, outputs: usize) -> Result<Linear> {
        Linear::with_options(inputs, outputs, true, DType::F32)
    }

    pub fn with_options(inputs: usize, outputs: usize, bias: bool, dtype: DType) -> Result<Linear> {
        let bound = 1.0 / (inputs.max(1) as f64).sqrt();
        let weight = Var::parameter("weight", uniform(&[outputs, inputs], bound, dtype)?)?;
        let bias =
            if bias { Some(Var::parameter("bias", uniform(&[outputs], bound, dtype)?)?) } else { None };
        Ok(Linear { weight, bias })
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // x wᵀ as one op: the weight is read transposed, not transposed first.
        let weighted = || x.matmul_transposed(&self.weight.get(), false, true);
        match &self.bias {
            // torch's F.linear: one op, the bias added in the same program.
            Some(b) => crate::compile::fused_op("linear", || weighted()?.add(&b.get())),
            None => weighted(),
        }
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        let mut v = vec![("weight".to_string(), self.weight.clone())];
        if let Some(b) = &self.bias {
            v.push(("bias".to_string(), b.clone()));
        }
        v
    }
}

/// 2-D convolution layer, as torch's `nn.Conv2d`: weight `[out, in / groups, kh, kw]` and a
/// bias `[out]`, both initialised as torch does (kaiming-uniform with `a = √5`, i.e. uniform
/// ±1/√fan_in with `fan_in = in / groups * kh * kw`). Input `[N, in, H, W]` (or `[in, H, W]`).
pub struct Conv2d {
    pub weight: Var,
    pub bias: Option<Var>,
    pub stride: [usize; 2],
    pub padding: Padding,
    pub dilation: [usize; 2],
    pub groups: usize,
}

impl Conv2d {
    /// Stride 1, no padding, dilation 1, one group, with a bias, f32.
    pub fn new(inputs: usize, outputs: usize, kernel: [usize; 2]) -> Result<Conv2d> {
        Conv2d::with_options(inputs, outputs, kernel, [1, 1], 0.into(), [1, 1], 1, true, DType::F32)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn with_options(
        inputs: usize,
        outputs: usize,
        kernel: [usize; 2],
        stride: [usize; 2],
        padding: Padding,
        dilation: [usize; 2],
        groups: usize,
        bias: bool,
        dtype: DType,
    ) -> Result<Conv2d> {
        if groups == 0 || !inputs.is_multiple_of(groups) || !outputs.is_multiple_of(groups) {
            return Err(Error::invalid(
                "Conv2d",
                format!("groups={groups} must divide the input ({inputs}) and output ({outputs}) channels"),
            ));
        }
        let fan_in = inputs / groups * kernel[0] * kernel[1];
        let bound = 1.0 / (fan_in.max(1) as f64).sqrt();
        let shape = [outputs, inputs / groups, kernel[0], kernel[1]];
        let weight = Var::parameter("weight", uniform(&shape, bound, dtype)?)?;
        let bias =
            if bias { Some(Var::parameter("bias", uniform(&[outputs], bound, dtype)?)?) } else { None };
        Ok(Conv2d { weight, bias, stride, padding, dilation, groups })
    }
}

impl Module for Conv2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // A [C, H, W] input is one sample.
        let batched = if x.rank() == 3 { x.unsqueeze(0)? } else { x.clone() };
        let w = self.weight.get();
        let y = batched.conv2d(&w, self.stride, self.padding.clone(), self.dilation, self.groups)?;
        let y = match &self.bias {
            Some(b) => y.add(&b.get().reshape(&[-1, 1, 1])?)?,
            None => y,
        };
        if x.rank() == 3 {
            y.squeeze(0)
        } else {
            Ok(y)
        }
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        let mut v = vec![("weight".to_string(), self.weight.clone())];
        if let Some(b) = &self.bias {
            v.push(("bias".to_string(), b.clone()));
        }
        v
    }
}

/// Max pooling over the last two dims, as torch's `nn.MaxPool2d` (stride defaults to the
/// kernel).
pub struct MaxPool2d {
    pub kernel: [usize; 2],
    pub stride: Option<[usize; 2]>,
    pub padding: [usize; 2],
}

impl MaxPool2d {
    pub fn new(kernel: [usize; 2]) -> MaxPool2d {
        MaxPool2d { kernel, stride: None, padding: [0, 0] }
    }
}

impl Module for MaxPool2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.max_pool2d(self.kernel, self.stride, self.padding)
    }
    fn named_parameters(&self) -> Vec<(String, Var)> {
        Vec::new()
    }
}

/// Average pooling over the last two dims, as torch's `nn.AvgPool2d` (padding zeros count).
pub struct AvgPool2d {
    pub kernel: [usize; 2],
    pub stride: Option<[usize; 2]>,
    pub padding: [usize; 2],
}

impl AvgPool2d {
    pub fn new(kernel: [usize; 2]) -> AvgPool2d {
        AvgPool2d { kernel, stride: None, padding: [0, 0] }
    }
}

impl Module for AvgPool2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.avg_pool2d(self.kernel, self.stride, self.padding)
    }
    fn named_parameters(&self) -> Vec<(String, Var)> {
        Vec::new()
    }
}

/// Flattens every dim after the first (torch's `nn.Flatten()` default: `[N, ...] -> [N, -1]`).
pub struct Flatten;

impl Module for Flatten {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if x.rank() == 0 {
            return Err(Error::shape("Flatten", "needs at least one dim"));
        }
        x.reshape(&[x.shape()[0] as isize, -1])
    }
    fn named_parameters(&self) -> Vec<(String, Var)> {
        Vec::new()
    }
}

/// A lookup table: row `i` of the weight `[count, dim]` for index `i` (initialised N(0, 1)).
pub struct Embedding {
    pub weight: Var,
}

impl Embedding {
    pub fn new(count: usize, dim: usize) -> Result<Embedding> {
        Ok(Embedding { weight: Var::parameter("weight", Tensor::randn(&[count, dim], DType::F32)?)? })
    }

    /// Rows for integer `indices` of any shape: the result has shape `indices.shape + [dim]`.
    /// Indices are checked as [`Tensor::index_select`] checks them: one outside `-count..count`
    /// is an error; a negative one counts from the end (torch's embedding refuses those).
    pub fn lookup(&self, indices: &Tensor) -> Result<Tensor> {
        let w = self.weight.get();
        let dim = w.shape()[1];
        let rows = w.index_select(0, &indices.flatten()?)?;
        let mut shape: Vec<isize> = indices.shape().iter().map(|&d| d as isize).collect();
        shape.push(dim as isize);
        rows.reshape(&shape)
    }
}

impl Module for Embedding {
    fn forward(&self, indices: &Tensor) -> Result<Tensor> {
        self.lookup(indices)
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        vec![("weight".to_string(), self.weight.clone())]
    }
}

/// Normalises over the last dim to mean 0 and variance 1, then scales and shifts (learned).
pub struct LayerNorm {
    pub weight: Var,
    pub bias: Var,
    pub eps: f64,
}

impl LayerNorm {
    pub fn new(dim: usize) -> Result<LayerNorm> {
        Ok(LayerNorm {
            weight: Var::parameter("weight", Tensor::ones(&[dim], DType::F32)?)?,
            bias: Var::parameter("bias", Tensor::zeros(&[dim], DType::F32)?)?,
            eps: 1e-5,
        })
    }
}

impl Module for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        crate::compile::fused_op("layer_norm", || {
            let mean = x.mean(&[-1], true)?;
            let centered = x.sub(&mean)?;
            // Biased variance, as torch's layer_norm.
            let var = centered.mul(&centered)?.mean(&[-1], true)?;
            let normed = centered.mul(&var.add_scalar(self.eps)?.rsqrt()?)?;
            normed.mul(&self.weight.get())?.add(&self.bias.get())
        })
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        vec![("weight".to_string(), self.weight.clone()), ("bias".to_string(), self.bias.clone())]
    }
}

/// Batch normalisation over dim 1 of `[N, C, ...]` (torch's `F.batch_norm`). Training: each
/// channel is normalised with its batch mean and biased variance, and the running statistics
/// move towards the batch's (`new = (1 - momentum) old + momentum batch`, the variance
/// unbiased, as torch); evaluation: the running statistics normalise. Then `weight` scales and
/// `bias` shifts, per channel.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm(
    x: &Tensor,
    running_mean: &Var,
    running_var: &Var,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    training: bool,
    momentum: f64,
    eps: f64,
) -> Result<Tensor> {
    let shape = x.shape().to_vec();
    let channels = *shape.get(1).unwrap_or(&0);
    let stats = running_mean.get();
    if shape.len() < 2
        || !x.dtype().is_float()
        || stats.shape() != [channels]
        || running_var.get().shape() != [channels]
    {
        let msg = format!(
            "needs a float [N, C, ...] input and running statistics [C], got {}, {} and {}",
            x.spec(),
            stats.spec(),
            running_var.get().spec()
        );
        return Err(Error::shape("batch_norm", msg));
    }
    // Per-channel values broadcast against [N, C, 1, ...].
    let mut column = vec![1isize; shape.len()];
    column[1] = -1;
    let normed = if training {
        let count: usize = shape.iter().enumerate().filter(|&(d, _)| d != 1).map(|(_, &s)| s).product();
        if count < 2 {
            let msg = format!("expected more than 1 value per channel when training, got input {}", x.spec());
            return Err(Error::invalid("batch_norm", msg));
        }
        let over: Vec<isize> = (0..shape.len() as isize).filter(|&d| d != 1).collect();
        let mean = x.mean(&over, true)?;
        let centered = x.sub(&mean)?;
        let var = centered.square()?.mean(&over, true)?;
        let unbiased = var.mul_scalar(count as f64 / (count - 1) as f64)?.reshape(&[-1])?;
        let blend = |old: &Var, batch: &Tensor| -> Result<()> {
            old.set(old.get().mul_scalar(1.0 - momentum)?.add(&batch.detach().mul_scalar(momentum)?)?)
        };
        blend(running_mean, &mean.reshape(&[-1])?)?;
        blend(running_var, &unbiased)?;
        centered.mul(&var.add_scalar(eps)?.rsqrt()?)?
    } else {
        let mean = stats.reshape(&column)?;
        let inv = running_var.get().add_scalar(eps)?.rsqrt()?.reshape(&column)?;
        x.sub(&mean)?.mul(&inv)?
    };
    let scaled = match weight {
        Some(w) => normed.mul(&w.reshape(&column)?)?,
        None => normed,
    };
    match bias {
        Some(b) => scaled.add(&b.reshape(&column)?),
        None => Ok(scaled),
    }
}

/// Batch normalisation of `[N, C, H, W]` images, as torch's `nn.BatchNorm2d`: a learned scale
/// (ones) and shift (zeros) per channel, running mean (zeros) and variance (ones) as buffers,
/// momentum 0.1, eps 1e-5; training mode until [`Module::eval`].
pub struct BatchNorm2d {
    pub weight: Var,
    pub bias: Var,
    pub running_mean: Var,
    pub running_var: Var,
    pub momentum: f64,
    pub eps: f64,
    training: AtomicBool,
}

impl BatchNorm2d {
    pub fn new(channels: usize) -> Result<BatchNorm2d> {
        Ok(BatchNorm2d {
            weight: Var::parameter("weight", Tensor::ones(&[channels], DType::F32)?)?,
            bias: Var::parameter("bias", Tensor::zeros(&[channels], DType::F32)?)?,
            running_mean: Var::new("running_mean", Tensor::zeros(&[channels], DType::F32)?),
            running_var: Var::new("running_var", Tensor::ones(&[channels], DType::F32)?),
            momentum: 0.1,
            eps: 1e-5,
            training: AtomicBool::new(true),
        })
    }
}

impl Module for BatchNorm2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if x.rank() != 4 {
            return Err(Error::shape("BatchNorm2d", format!("needs [N, C, H, W], got {}", x.spec())));
        }
        let (w, b) = (self.weight.get(), self.bias.get());
        let training = self.training.load(Ordering::Relaxed);
        batch_norm(
            x,
            &self.running_mean,
            &self.running_var,
            Some(&w),
            Some(&b),
            training,
            self.momentum,
            self.eps,
        )
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        vec![("weight".to_string(), self.weight.clone()), ("bias".to_string(), self.bias.clone())]
    }

    fn named_buffers(&self) -> Vec<(String, Var)> {
        vec![
            ("running_mean".to_string(), self.running_mean.clone()),
            ("running_var".to_string(), self.running_var.clone()),
        ]
    }

    fn set_training(&self, on: bool) {
        self.training.store(on, Ordering::Relaxed);
    }
}

/// Self-attention of `[B, T, dim]` inputs over `heads` heads (torch's `nn.MultiheadAttention`
/// with `batch_first=True`, queries, keys and values all the input): one projection to q, k
/// and v (`in_proj`, `[3 dim, dim]`), scaled dot-product attention per head, the heads merged
/// and projected (`out_proj`). `causal` lets position `i` attend positions `0..=i` only.
pub struct MultiheadAttention {
    pub in_proj: Linear,
    pub out_proj: Linear,
    pub heads: usize,
    pub causal: bool,
}

/// Keys and values of the positions decoded so far, for one attention layer: `[B, heads,
/// capacity, head_dim]` each, filled one position per [`MultiheadAttention::decode`]. Shapes
/// never change while it fills, so every decoding step runs the same cached executables.
pub struct KvCache {
    keys: Tensor,
    values: Tensor,
    positions: Tensor,
    len: usize,
}

impl KvCache {
    /// Positions filled so far.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions it can hold.
    pub fn capacity(&self) -> usize {
        self.positions.shape()[0]
    }
}

impl MultiheadAttention {
    pub fn new(dim: usize, heads: usize, causal: bool) -> Result<MultiheadAttention> {
        if heads == 0 || !dim.is_multiple_of(heads) {
            let msg = format!("dim {dim} must be a multiple of the number of heads ({heads})");
            return Err(Error::invalid("MultiheadAttention", msg));
        }
        Ok(MultiheadAttention {
            in_proj: Linear::new(dim, 3 * dim)?,
            out_proj: Linear::new(dim, dim)?,
            heads,
            causal,
        })
    }

    fn dim(&self) -> usize {
        self.out_proj.weight.get().shape()[0]
    }

    /// q, k, v of `[B, T, dim]`, each `[B, heads, T, head_dim]`.
    fn project(&self, x: &Tensor) -> Result<[Tensor; 3]> {
        let dim = self.dim();
        if x.rank() != 3 || x.shape()[2] != dim {
            let msg = format!("needs [B, T, {dim}] inputs, got {}", x.spec());
            return Err(Error::shape("MultiheadAttention", msg));
        }
        let (b, t) = (x.shape()[0] as isize, x.shape()[1] as isize);
        let qkv = self.in_proj.forward(x)?;
        let head = |i: usize| -> Result<Tensor> {
            qkv.narrow(-1, i * dim, dim)?.reshape(&[b, t, self.heads as isize, -1])?.permute(&[0, 2, 1, 3])
        };
        Ok([head(0)?, head(1)?, head(2)?])
    }

    /// `[B, heads, T, head_dim]` back to `[B, T, dim]`, projected.
    fn merge(&self, heads: &Tensor) -> Result<Tensor> {
        let (b, t) = (heads.shape()[0] as isize, heads.shape()[2] as isize);
        self.out_proj.forward(&heads.permute(&[0, 2, 1, 3])?.reshape(&[b, t, -1])?)
    }

    /// Self-attention of `x` `[B, T, dim]`; `mask` (bool, broadcast to `[B, heads, T, T]`)
    /// is true where a query may attend, on top of the causal rule if set.
    pub fn attend(&self, x: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
        crate::compile::fused_op("attention", || {
            let [q, k, v] = self.project(x)?;
            self.merge(&q.scaled_dot_product_attention(&k, &v, mask, self.causal)?)
        })
    }

    /// An empty key/value cache for decoding `batch` sequences of up to `capacity` positions.
    pub fn new_cache(&self, batch: usize, capacity: usize) -> Result<KvCache> {
        let w = self.out_proj.weight.get();
        let shape = [batch, self.heads, capacity, self.dim() / self.heads];
        Ok(KvCache {
            keys: Tensor::full_on(&shape, 0.0, w.dtype(), w.device())?,
            values: Tensor::full_on(&shape, 0.0, w.dtype(), w.device())?,
            positions: Tensor::arange_on(0.0, capacity as f64, 1.0, DType::I64, w.device())?,
            len: 0,
        })
    }

    /// Attention of one new position `x` `[B, 1, dim]` over it and every position in `cache`,
    /// which it joins: the same result as [`MultiheadAttention::attend`] (causal) gives at
    /// that position for the whole sequence, without recomputing the earlier keys and values.
    pub fn decode(&self, x: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        if x.rank() != 3 || x.shape()[1] != 1 {
            let msg = format!("decodes one position at a time, [B, 1, dim], got {}", x.spec());
            return Err(Error::shape("MultiheadAttention::decode", msg));
        }
        if cache.len == cache.capacity() {
            let msg = format!("the key/value cache is full ({} positions)", cache.capacity());
            return Err(Error::invalid("MultiheadAttention::decode", msg));
        }
        let [q, k, v] = self.project(x)?;
        let pos = cache.len as f64;
        // The new key and value go to slot `pos`; the query sees slots 0..=pos.
        let slot = cache.positions.eq_scalar(pos)?.reshape(&[1, 1, -1, 1])?;
        cache.keys = slot.where_cond(&k.broadcast_to(cache.keys.shape())?, &cache.keys)?;
        cache.values = slot.where_cond(&v.broadcast_to(cache.values.shape())?, &cache.values)?;
        cache.len += 1;
        let seen = cache.positions.le_scalar(pos)?.reshape(&[1, 1, 1, -1])?;
        self.merge(&q.scaled_dot_product_attention(&cache.keys, &cache.values, Some(&seen), false)?)
    }
}

impl Module for MultiheadAttention {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.attend(x, None)
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        let mut v = prefixed("in_proj", self.in_proj.named_parameters());
        v.extend(prefixed("out_proj", self.out_proj.named_parameters()));
        v
    }
}

/// A pre-norm transformer block (GPT-2's): `x + attn(ln1(x))`, then `h + mlp(ln2(h))` with a
/// GELU (exact) MLP of `dim -> hidden -> dim`. Inputs `[B, T, dim]`.
pub struct TransformerBlock {
    pub ln1: LayerNorm,
    pub attn: MultiheadAttention,
    pub ln2: LayerNorm,
    pub fc: Linear,
    pub proj: Linear,
}

impl TransformerBlock {
    /// Causal attention, an MLP of `4 dim`.
    pub fn new(dim: usize, heads: usize) -> Result<TransformerBlock> {
        TransformerBlock::with_options(dim, heads, 4 * dim, true)
    }

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
    pub fn decode(&self, x: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
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

/// Zeroes each element with probability `p` while training and scales the rest by
/// 1/(1-p); the identity in evaluation. The mask comes from the on-device generator
/// (seeded with `manual_seed`), and is drawn afresh at every call of a compiled step.
pub struct Dropout {
    pub p: f64,
    training: AtomicBool,
}

impl Dropout {
    pub fn new(p: f64) -> Result<Dropout> {
        if !(0.0..1.0).contains(&p) {
            return Err(Error::invalid("dropout", format!("p must be in [0, 1), got {p}")));
        }
        Ok(Dropout { p, training: AtomicBool::new(true) })
    }
}

impl Module for Dropout {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if !self.training.load(Ordering::Relaxed) || self.p == 0.0 {
            return Ok(x.clone());
        }
        let keep = Tensor::random_on(crate::ops::Dist::Uniform, x.shape(), x.dtype(), x.device())?
            .ge_scalar(self.p)?;
        x.mul(&keep.to_dtype(x.dtype())?)?.div_scalar(1.0 - self.p)
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        Vec::new()
    }

    fn set_training(&self, on: bool) {
        self.training.store(on, Ordering::Relaxed);
    }
}

/// `max(x, 0)`.
pub fn relu(x: &Tensor) -> Result<Tensor> {
    x.relu()
}

/// GELU, tanh approximation (torch's `approximate="tanh"`):
/// `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))`.
pub fn gelu(x: &Tensor) -> Result<Tensor> {
    crate::compile::fused_op("gelu", || {
        let k = (2.0 / std::f64::consts::PI).sqrt();
        let inner = x.add(&x.mul(x)?.mul(x)?.mul_scalar(0.044715)?)?.mul_scalar(k)?;
        x.mul(&inner.tanh()?.add_scalar(1.0)?)?.mul_scalar(0.5)
    })
}

/// GELU, exact (torch's default `F.gelu`): `0.5 x (1 + erf(x / √2))`.
pub fn gelu_exact(x: &Tensor) -> Result<Tensor> {
    crate::compile::fused_op("gelu", || {
        x.mul(&x.mul_scalar(std::f64::consts::FRAC_1_SQRT_2)?.erf()?.add_scalar(1.0)?)?.mul_scalar(0.5)
    })
}

/// The activations as layers, for [`Sequential`].
pub struct Relu;
pub struct Gelu;

impl Module for Relu {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        relu(x)
    }
    fn named_parameters(&self) -> Vec<(String, Var)> {
        Vec::new()
    }
}

impl Module for Gelu {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        gelu(x)
    }
    fn named_parameters(&self) -> Vec<(String, Var)> {
        Vec::new()
    }
}

/// Layers applied in order; parameters are named `<index>.<name>`.
#[derive(Default)]
pub struct Sequential {
    layers: Vec<Box<dyn Module>>,
}

impl Sequential {
    pub fn new() -> Sequential {
        Sequential::default()
    }

    /// Appends a layer (builder style).
    // torch's name; `Sequential` is no number, so `+` would not read as this.
    #[allow(clippy::should_implement_trait)]
    pub fn add(mut self, layer: impl Module + 'static) -> Sequential {
        self.layers.push(Box::new(layer));
        self
    }

    pub fn len(&self) -> usize {
        self.layers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }
}

impl Module for Sequential {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = x.clone();
        for layer in &self.layers {
            h = layer.forward(&h)?;
        }
        Ok(h)
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        self.layers
            .iter()
            .enumerate()
            .flat_map(|(i, l)| prefixed(&i.to_string(), l.named_parameters()))
            .collect()
    }

    fn named_buffers(&self) -> Vec<(String, Var)> {
        self.layers
            .iter()
            .enumerate()
            .flat_map(|(i, l)| prefixed(&i.to_string(), l.named_buffers()))
            .collect()
    }

    fn set_training(&self, on: bool) {
        for l in &self.layers {
            l.set_training(on);
        }
    }
}

/// Mean cross-entropy of `logits [N, C]` against integer class `targets [N]` (i32 or i64),
/// computed from log-softmax (as torch's `cross_entropy`). A target outside `0..C` uploaded
/// from the host is an error (torch: "Target 7 is out of bounds"); one computed on the device
/// is not checked and adds nothing to the loss.
pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    if logits.rank() != 2 || targets.rank() != 1 || targets.shape()[0] != logits.shape()[0] {
        return Err(Error::shape(
            "cross_entropy",
            format!(
                "needs logits [N, C] and targets [N], got {:?} and {:?}",
                logits.shape(),
                targets.shape()
            ),
        ));
    }
    if !matches!(targets.dtype(), DType::I32 | DType::I64) {
        return Err(Error::dtype(
            "cross_entropy",
            format!("targets must be class indices (i32 or i64), got {}", targets.dtype()),
        ));
    }
    let classes = logits.shape()[1];
    // Targets from the host are checked here (a bad one would silently pick no class);
    // targets computed on the device are not.
    if let Some((lo, hi)) = targets.host_bounds().filter(|(lo, hi)| lo <= hi) {
        if lo < 0 || hi >= classes as i64 {
            let bad = if lo < 0 { lo } else { hi };
            let msg = format!("target {bad} is out of range for {classes} classes");
            return Err(Error::invalid("cross_entropy", msg));
        }
    }
    crate::compile::fused_op("cross_entropy", || {
        // Targets split over a mesh (a data-parallel batch) compare with the classes everywhere.
        let positions =
            crate::ops::create::CreateOps::arange_at(targets, 0.0, classes as f64, 1.0, targets.dtype())?;
        let onehot = targets.unsqueeze(1)?.eq(&positions.unsqueeze(0)?)?.to_dtype(logits.dtype())?;
        logits.log_softmax(1)?.mul(&onehot)?.sum(&[1], false)?.mean_all()?.neg()
    })
}

/// Mean squared error.
pub fn mse(prediction: &Tensor, target: &Tensor) -> Result<Tensor> {
    crate::compile::fused_op("mse", || {
        let d = prediction.sub(target)?;
        d.mul(&d)?.mean_all()
    })
}
