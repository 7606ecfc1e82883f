//! Pooling layers over the last two dims (torch's `nn.MaxPool2d`, `nn.AvgPool2d`); no parameters.

use super::Module;
use crate::error::Result;
use crate::tensor::Tensor;
use crate::var::Var;

/// Max pooling over the last two dims, as torch's `nn.MaxPool2d` (stride defaults to the
/// kernel).
pub struct MaxPool2d {
    /// Window size along H and W.
    pub kernel: [usize; 2],
    /// Stride along H and W (`None`: the kernel).
    pub stride: Option<[usize; 2]>,
    /// Padding of H and W.
    pub padding: [usize; 2],
}

impl MaxPool2d {
    /// Pooling over `kernel` windows, stride the kernel, no padding.
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
    /// Window size along H and W.
    pub kernel: [usize; 2],
    /// Stride along H and W (`None`: the kernel).
    pub stride: Option<[usize; 2]>,
    /// Padding of H and W.
    pub padding: [usize; 2],
}

impl AvgPool2d {
    /// Pooling over `kernel` windows, stride the kernel, no padding.
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
