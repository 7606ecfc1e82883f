//! Lookup tables (torch's `nn.Embedding`): row `i` of the weight for index `i`.

use super::Module;
use crate::dtype::DType;
use crate::error::Result;
use crate::tensor::Tensor;
use crate::var::Var;

/// A lookup table: row `i` of the weight `[count, dim]` for index `i` (initialised N(0, 1)).
pub struct Embedding {
    /// The table, `[count, dim]`.
    pub weight: Var,
}

impl Embedding {
    /// A table of `count` rows of `dim`, drawn from N(0, 1).
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
