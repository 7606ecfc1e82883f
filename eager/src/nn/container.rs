//! Layers that hold or reshape other layers' data: `Sequential` and `Flatten`.

use super::{prefixed, Module};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::var::Var;

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

/// Layers applied in order; parameters are named `<index>.<name>`.
#[derive(Default)]
pub struct Sequential {
    layers: Vec<Box<dyn Module>>,
}

impl Sequential {
    /// An empty sequence.
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

    /// Number of layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether it has no layers.
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
