//! Neural-network layers, activations and losses, composed from the eager ops (as torch.nn).
//! Layers keep their weights in [`Var`]s, so an optimizer can update them and a compiled
//! training step reads and writes them.

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

    /// Training or evaluation mode (only dropout cares).
    fn set_training(&mut self, _on: bool) {}
}

/// The named values of a module's parameters, for saving (`eager::io::save_safetensors`).
pub fn state_dict(m: &dyn Module) -> Vec<(String, Tensor)> {
    m.named_parameters().into_iter().map(|(n, v)| (n, v.get().detach())).collect()
}

/// Sets a module's parameters from named values (as loaded from a file); every parameter
/// must be present with its shape and dtype.
pub fn load_state_dict(m: &dyn Module, values: &[(String, Tensor)]) -> Result<()> {
    for (name, var) in m.named_parameters() {
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
        let y = x.matmul(&self.weight.get().t()?)?;
        match &self.bias {
            Some(b) => y.add(&b.get()),
            None => Ok(y),
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
        let mean = x.mean(&[-1], true)?;
        let centered = x.sub(&mean)?;
        // Biased variance, as torch's layer_norm.
        let var = centered.mul(&centered)?.mean(&[-1], true)?;
        let normed = centered.mul(&var.add_scalar(self.eps)?.rsqrt()?)?;
        normed.mul(&self.weight.get())?.add(&self.bias.get())
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        vec![("weight".to_string(), self.weight.clone()), ("bias".to_string(), self.bias.clone())]
    }
}

/// Zeroes each element with probability `p` while training and scales the rest by
/// 1/(1-p); the identity in evaluation. The mask comes from the on-device generator
/// (seeded with `manual_seed`), and is drawn afresh at every call of a compiled step.
pub struct Dropout {
    pub p: f64,
    pub training: bool,
}

impl Dropout {
    pub fn new(p: f64) -> Result<Dropout> {
        if !(0.0..1.0).contains(&p) {
            return Err(Error::invalid("dropout", format!("p must be in [0, 1), got {p}")));
        }
        Ok(Dropout { p, training: true })
    }
}

impl Module for Dropout {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if !self.training || self.p == 0.0 {
            return Ok(x.clone());
        }
        let keep = Tensor::random_on(crate::ops::Dist::Uniform, x.shape(), x.dtype(), x.device())?
            .ge_scalar(self.p)?;
        x.mul(&keep.to_dtype(x.dtype())?)?.div_scalar(1.0 - self.p)
    }

    fn named_parameters(&self) -> Vec<(String, Var)> {
        Vec::new()
    }

    fn set_training(&mut self, on: bool) {
        self.training = on;
    }
}

/// `max(x, 0)`.
pub fn relu(x: &Tensor) -> Result<Tensor> {
    x.relu()
}

/// GELU, tanh approximation (torch's `approximate="tanh"`):
/// `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))`.
pub fn gelu(x: &Tensor) -> Result<Tensor> {
    let k = (2.0 / std::f64::consts::PI).sqrt();
    let inner = x.add(&x.mul(x)?.mul(x)?.mul_scalar(0.044715)?)?.mul_scalar(k)?;
    x.mul(&inner.tanh()?.add_scalar(1.0)?)?.mul_scalar(0.5)
}

/// GELU, exact (torch's default `F.gelu`): `0.5 x (1 + erf(x / √2))`.
pub fn gelu_exact(x: &Tensor) -> Result<Tensor> {
    x.mul(&x.mul_scalar(std::f64::consts::FRAC_1_SQRT_2)?.erf()?.add_scalar(1.0)?)?.mul_scalar(0.5)
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
            .flat_map(|(i, l)| l.named_parameters().into_iter().map(move |(n, v)| (format!("{i}.{n}"), v)))
            .collect()
    }

    fn set_training(&mut self, on: bool) {
        for l in &mut self.layers {
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
    let positions = Tensor::arange_on(0.0, classes as f64, 1.0, targets.dtype(), targets.device())?;
    let onehot = targets.unsqueeze(1)?.eq(&positions.unsqueeze(0)?)?.to_dtype(logits.dtype())?;
    logits.log_softmax(1)?.mul(&onehot)?.sum(&[1], false)?.mean_all()?.neg()
}

/// Mean squared error.
pub fn mse(prediction: &Tensor, target: &Tensor) -> Result<Tensor> {
    let d = prediction.sub(target)?;
    d.mul(&d)?.mean_all()
}
