//! Reading a tensor back: values to the host (waiting for the op that makes them), and copies
//! to another device.

use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};

use crate::device::Device;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};

use super::Tensor;

impl Tensor {
    /// Copies to `device`.
    pub fn to(&self, device: Device) -> Result<Tensor> {
        super::dispatch::copy_to(self, device)
    }

    /// The values, row-major. `T` must be this tensor's dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype() {
            return Err(Error::dtype(
                "to_vec",
                format!(
                    "asked for {} values of a {} tensor; convert with .to_dtype(DType::{:?}) first",
                    T::DTYPE,
                    self.dtype(),
                    T::DTYPE
                ),
            ));
        }
        let bytes = super::download(self)?;
        Ok(decode(&bytes))
    }

    /// The values' bytes, row-major in the host's byte order, whatever the dtype (the inverse
    /// of [`Tensor::from_bytes_on`]; what a safetensors file stores).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        super::download(self)
    }

    /// The values as `f64`, whatever the dtype.
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        let bytes = super::download(self)?;
        Ok(decode_f64(&bytes, self.dtype()))
    }

    /// The single value of a one-element tensor.
    pub fn item<T: Element>(&self) -> Result<T> {
        if self.numel() != 1 {
            return Err(Error::shape(
                "item",
                format!("needs a one-element tensor, got shape {:?}", self.shape()),
            ));
        }
        Ok(self.to_vec::<T>()?[0])
    }

    /// The values copied to the host as an n-dimensional array.
    pub fn to_ndarray<T: Element>(&self) -> Result<ArrayD<T>> {
        let v = self.to_vec::<T>()?;
        Ok(ArrayD::from_shape_vec(IxDyn(self.shape()), v).expect("shape matches numel"))
    }
}

fn decode<T: Element>(bytes: &[u8]) -> Vec<T> {
    let n = bytes.len() / std::mem::size_of::<T>();
    let mut out: Vec<T> = Vec::with_capacity(n);
    if T::DTYPE == DType::Bool {
        // Normalise to 0/1 before viewing bytes as bool.
        let norm: Vec<u8> = bytes.iter().map(|&b| (b != 0) as u8).collect();
        // SAFETY: `n` elements of a one-byte type, every byte 0 or 1.
        unsafe {
            std::ptr::copy_nonoverlapping(norm.as_ptr(), out.as_mut_ptr() as *mut u8, n);
            out.set_len(n);
        }
    } else {
        // SAFETY: every non-bool Element is valid for any bit pattern; sizes match.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.as_mut_ptr() as *mut u8, bytes.len());
            out.set_len(n);
        }
    }
    out
}

fn decode_f64(bytes: &[u8], dtype: DType) -> Vec<f64> {
    fn conv<T: Element>(b: &[u8]) -> Vec<f64> {
        decode::<T>(b).into_iter().map(Element::to_f64).collect()
    }
    match dtype {
        DType::Bool => conv::<bool>(bytes),
        DType::U8 => conv::<u8>(bytes),
        DType::I32 => conv::<i32>(bytes),
        DType::I64 => conv::<i64>(bytes),
        DType::U32 => conv::<u32>(bytes),
        DType::U64 => conv::<u64>(bytes),
        DType::F16 => conv::<f16>(bytes),
        DType::BF16 => conv::<bf16>(bytes),
        DType::F32 => conv::<f32>(bytes),
        DType::F64 => conv::<f64>(bytes),
    }
}
