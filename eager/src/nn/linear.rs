//! The fully connected layer, `y = x Wᵀ + b` (torch's `nn.Linear`). Autocast
//! ([`autocast`](mod@crate::autocast)): on the low-precision list, bias included, as torch's `linear`.

use super::{uniform, Module};
use crate::dtype::DType;
use crate::error::Result;
use crate::tensor::Tensor;
use crate::var::Var;

/// `y = x Wᵀ + b`, weight `[out, in]`, initialised as torch does (uniform ±1/√in).
pub struct Linear {
    /// The weight, `[out, in]`.
    pub weight: Var,
    /// The bias, `[out]`, if any.
    pub bias: Option<Var>,
}

impl Linear {
    /// A layer of `inputs -> outputs` with a bias, f32.
    pub fn new(inputs: usize, outputs: usize) -> Result<Linear> {
        Linear::with_options(inputs, outputs, true, DType::F32)
    }

    /// A layer of `inputs -> outputs`, with a bias if `bias`, of `dtype`.
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
        match self.lora() {
            Some(adapter) => self.forward_adapted(x, &adapter),
            None => self.forward_base(x),
        }
    }

    /// The weight and bias, and while a LoRA adapter is on the layer (`nn::apply_lora`) its
    /// `lora_A.weight` and `lora_B.weight`.
    fn named_parameters(&self) -> Vec<(String, Var)> {
        let mut v = vec![("weight".to_string(), self.weight.clone())];
        if let Some(b) = &self.bias {
            v.push(("bias".to_string(), b.clone()));
        }
        v.extend(self.lora_parameters());
        v
    }
}

impl Linear {
    /// `x Wᵀ + b`, without any LoRA adapter.
    pub(crate) fn forward_base(&self, x: &Tensor) -> Result<Tensor> {
        // torch's F.linear: one op, the product and the bias in one program.
        crate::compile::fused_op("linear", || self.apply(x))
    }

    fn apply(&self, x: &Tensor) -> Result<Tensor> {
        // x wᵀ as one op: the weight is read transposed, not transposed first. A batch of
        // rows [B, T, in] is one [B T, in] matrix, so the weight is not broadcast per batch.
        let x = &crate::ops::autocast_low(x)?;
        let weighted = || {
            let w = self.weight.get();
            // A weight stored `[in, out]` for inference (Var::store_transposed) is read as it is.
            let stored_t = self.weight.is_stored_transposed();
            let outputs = w.shape()[if stored_t { 1 } else { 0 }];
            let product = |rows: &Tensor| {
                if stored_t {
                    rows.matmul(&w)
                } else {
                    rows.matmul_transposed(&w, false, true)
                }
            };
            if x.rank() > 2 {
                let mut out: Vec<isize> = x.shape()[..x.rank() - 1].iter().map(|&d| d as isize).collect();
                out.push(outputs as isize);
                product(&x.reshape(&[-1, x.shape()[x.rank() - 1] as isize])?)?.reshape(&out)
            } else {
                product(x)
            }
        };
        match &self.bias {
            // torch's F.linear: one op, the bias added in the same program.
            Some(b) => {
                crate::compile::fused_op("linear", || weighted()?.add(&crate::ops::autocast_low(&b.get())?))
            }
            None => weighted(),
        }
    }
}
