//! Activation functions and their parameterless layers (ReLU, GELU).

use super::Module;
use crate::error::Result;
use crate::tensor::Tensor;
use crate::var::Var;

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

/// SiLU (swish), `x * sigmoid(x)` (torch's `F.silu`; Llama's MLP activation).
pub fn silu(x: &Tensor) -> Result<Tensor> {
    x.silu()
}

/// The activations as layers, for [`Sequential`](super::Sequential).
pub struct Relu;
/// GELU as a layer.
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
