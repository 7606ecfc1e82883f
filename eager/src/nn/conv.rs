//! Convolution layers (torch's `nn.Conv2d`): weights `[out, in / groups, kh, kw]`, a bias per
//! output channel. Autocast ([`autocast`](mod@crate::autocast)): on the low-precision list, bias included.

use super::{uniform, Module};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::Padding;
use crate::tensor::Tensor;
use crate::var::Var;

/// 2-D convolution layer, as torch's `nn.Conv2d`: weight `[out, in / groups, kh, kw]` and a
/// bias `[out]`, both initialised as torch does (kaiming-uniform with `a = √5`, i.e. uniform
/// ±1/√fan_in with `fan_in = in / groups * kh * kw`). Input `[N, in, H, W]` (or `[in, H, W]`).
pub struct Conv2d {
    /// The kernels, `[out, in / groups, kh, kw]`.
    pub weight: Var,
    /// The bias, `[out]`, if any.
    pub bias: Option<Var>,
    /// Stride along H and W.
    pub stride: [usize; 2],
    /// Padding of H and W.
    pub padding: Padding,
    /// Dilation along H and W.
    pub dilation: [usize; 2],
    /// Number of groups the channels are split into.
    pub groups: usize,
}

impl Conv2d {
    /// Stride 1, no padding, dilation 1, one group, with a bias, f32.
    pub fn new(inputs: usize, outputs: usize, kernel: [usize; 2]) -> Result<Conv2d> {
        Conv2d::with_options(inputs, outputs, kernel, [1, 1], 0.into(), [1, 1], 1, true, DType::F32)
    }

    #[allow(clippy::too_many_arguments)]
    /// A layer with every setting given.
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
        let conv = || batched.conv2d(&w, self.stride, self.padding.clone(), self.dilation, self.groups);
        let y = match &self.bias {
            // With its bias, one op (torch's `F.conv2d(x, w, b)`): one executable, not three.
            // Under autocast the bias joins the convolution's low precision, as torch's.
            Some(b) => crate::compile::fused_op("conv2d", || {
                conv()?.add(&crate::ops::autocast_low(&b.get())?.reshape(&[-1, 1, 1])?)
            })?,
            None => conv()?,
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
