//! Neural-network layers, activations and losses, composed from the eager ops (as torch.nn).
//! Layers keep their weights in [`Var`]s, so an optimizer can update them and a compiled
//! training step reads and writes them. One file per layer family; everything is re-exported
//! here, so paths stay `eager::nn::Linear` etc.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::var::Var;

mod activation;
mod attention;
mod container;
mod conv;
mod dropout;
mod embedding;
mod gqa;
mod kv_cache;
mod linear;
mod lora;
mod loss;
mod moe;
mod norm;
mod pool;
mod rotary;
mod sdpa;
mod transformer;

pub use activation::{gelu, gelu_exact, relu, silu, Gelu, Relu};
pub use attention::{attend_heads, merge_heads, split_heads, split_qkv, KvCache, MultiheadAttention};
pub use container::{Flatten, Sequential};
pub use conv::Conv2d;
pub use dropout::Dropout;
pub use embedding::Embedding;
pub use gqa::{GateActivation, GroupedQueryAttention, SwiGlu};
pub use kv_cache::StaticKvCache;
pub use linear::Linear;
pub use lora::{apply_lora, Lora, LoraConfig, LoraLinear};
pub use loss::{cross_entropy, mse};
pub use moe::SparseMoe;
pub use norm::{batch_norm, layer_norm, rms_norm, BatchNorm2d, LayerNorm, RmsNorm};
pub use pool::{AvgPool2d, MaxPool2d};
pub use rotary::{apply_rotary, rotate_half, RopeScaling, RotaryEmbedding, MAX_TABLE_POSITIONS};
pub use sdpa::{repeat_kv, scaled_dot_product_attention, AttentionOptions};
pub use transformer::TransformerBlock;

/// A layer or a model: a forward function and the parameters it trains.
pub trait Module {
    /// Runs the layer on `x`.
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
pub(crate) fn prefixed(prefix: &str, named: Vec<(String, Var)>) -> Vec<(String, Var)> {
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
pub(crate) fn uniform(shape: &[usize], bound: f64, dtype: DType) -> Result<Tensor> {
    Tensor::rand(shape, dtype)?.mul_scalar(2.0 * bound)?.sub_scalar(bound)
}
