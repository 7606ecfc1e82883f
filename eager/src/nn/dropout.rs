//! Dropout (torch's `nn.Dropout`): random zeroes while training, the identity in evaluation.

use std::sync::atomic::{AtomicBool, Ordering};

use super::Module;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::var::Var;

/// Zeroes each element with probability `p` while training and scales the rest by
/// 1/(1-p); the identity in evaluation. The mask comes from the on-device generator
/// (seeded with `manual_seed`), and is drawn afresh at every call of a compiled step.
pub struct Dropout {
    /// Probability of zeroing an element.
    pub p: f64,
    training: AtomicBool,
}

impl Dropout {
    /// Dropout with probability `p`, which must be in `[0, 1)`.
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
