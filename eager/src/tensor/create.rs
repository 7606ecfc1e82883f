//! Tensor constructors: from host data (uploaded), and made on the device (full, arange,
//! eye, random: built by `ops::create` and `ops::random`).

use crate::device::Device;
use crate::dtype::{as_bytes, DType, Element};
use crate::error::{Error, Result};
use crate::ops::create::CreateOps;
use crate::ops::random::RandomOps;
use crate::ops::Dist;
use crate::runtime;
use crate::shape::Spec;

use super::Tensor;

impl Tensor {
    /// A tensor of `shape` from row-major `data`, on the default device.
    pub fn from_slice<T: Element>(data: &[T], shape: &[usize]) -> Result<Tensor> {
        Tensor::from_slice_on(data, shape, runtime::default_device())
    }

    /// A tensor of `shape` from row-major `data`, on `device`.
    pub fn from_slice_on<T: Element>(data: &[T], shape: &[usize], device: Device) -> Result<Tensor> {
        let spec = Spec::new(shape, T::DTYPE);
        let Some((n, _)) = spec.checked_size() else {
            return Err(Error::shape("from_slice", crate::ops::too_large(&spec)));
        };
        if n != data.len() {
            return Err(Error::shape(
                "from_slice",
                format!("{} values do not fill shape {shape:?} ({n} elements)", data.len()),
            ));
        }
        let t = super::dispatch::upload(as_bytes(data), spec, device)?;
        Ok(t.with_host_bounds(int_bounds(as_bytes(data), T::DTYPE)))
    }

    /// A tensor of `shape` and `dtype` from its row-major bytes in the host's byte order (as a
    /// safetensors file or [`Tensor::to_bytes`] holds them), uploaded once; for dtypes with no
    /// Rust element type (bf16, f16) and for weights read straight from a mapped file.
    pub fn from_bytes_on(bytes: &[u8], shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        let spec = checked_bytes("from_bytes", bytes, shape, dtype)?;
        let t = super::dispatch::upload(bytes, spec, device)?;
        Ok(t.with_host_bounds(int_bounds(bytes, dtype)))
    }

    /// A 1-D tensor from a vector.
    pub fn from_vec<T: Element>(data: Vec<T>) -> Result<Tensor> {
        Tensor::from_slice(&data, &[data.len()])
    }

    /// A 0-d tensor.
    pub fn scalar<T: Element>(value: T) -> Result<Tensor> {
        Tensor::from_slice(&[value], &[])
    }

    /// A tensor from an `ndarray` array of any layout.
    pub fn from_ndarray<T: Element, S, D>(a: &ndarray::ArrayBase<S, D>) -> Result<Tensor>
    where
        S: ndarray::Data<Elem = T>,
        D: ndarray::Dimension,
    {
        let data: Vec<T> = a.iter().copied().collect();
        Tensor::from_slice(&data, a.shape())
    }

    /// A tensor of `shape` filled with `value`, on the default device.
    pub fn full(shape: &[usize], value: f64, dtype: DType) -> Result<Tensor> {
        Tensor::full_on(shape, value, dtype, runtime::default_device())
    }

    /// A tensor of `shape` filled with `value`, on `device`.
    pub fn full_on(shape: &[usize], value: f64, dtype: DType, device: Device) -> Result<Tensor> {
        CreateOps::full_on(shape, value, dtype, device)
    }

    /// Zeros of `shape`, on the default device.
    pub fn zeros(shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::full(shape, 0.0, dtype)
    }

    /// Ones of `shape`, on the default device.
    pub fn ones(shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::full(shape, 1.0, dtype)
    }

    /// Zeros of this tensor's shape, dtype and device.
    pub fn zeros_like(&self) -> Result<Tensor> {
        CreateOps::zeros_like(self)
    }

    /// Ones of this tensor's shape, dtype and device.
    pub fn ones_like(&self) -> Result<Tensor> {
        CreateOps::ones_like(self)
    }

    /// `[start, start + step, …]` below `end` (like `torch.arange`).
    pub fn arange(start: f64, end: f64, step: f64, dtype: DType) -> Result<Tensor> {
        Tensor::arange_on(start, end, step, dtype, runtime::default_device())
    }

    /// [`Tensor::arange`] on `device`.
    pub fn arange_on(start: f64, end: f64, step: f64, dtype: DType, device: Device) -> Result<Tensor> {
        CreateOps::arange_on(start, end, step, dtype, device)
    }

    /// The `n x n` identity.
    pub fn eye(n: usize, dtype: DType) -> Result<Tensor> {
        Tensor::eye_on(n, n, dtype, runtime::default_device())
    }

    /// The `n x m` identity on `device`.
    pub fn eye_on(n: usize, m: usize, dtype: DType, device: Device) -> Result<Tensor> {
        CreateOps::eye_on(n, m, dtype, device)
    }

    /// Uniform on [0, 1), generated on the device (seed with [`crate::manual_seed`]).
    pub fn rand(shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::random_on(Dist::Uniform, shape, dtype, runtime::default_device())
    }

    /// Standard normal, generated on the device (seed with [`crate::manual_seed`]).
    pub fn randn(shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::random_on(Dist::Normal, shape, dtype, runtime::default_device())
    }

    /// Random numbers of `dist`, generated on `device`.
    pub fn random_on(dist: Dist, shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        RandomOps::random_on(dist, shape, dtype, device)
    }
}

/// Smallest and largest value of i32/i64 host data, for index checks (`(MAX, MIN)` if empty).
fn int_bounds(bytes: &[u8], dtype: DType) -> Option<(i64, i64)> {
    let fold = |it: &mut dyn Iterator<Item = i64>| {
        it.fold((i64::MAX, i64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)))
    };
    match dtype {
        DType::I32 => {
            Some(fold(&mut bytes.chunks_exact(4).map(|c| i32::from_ne_bytes(c.try_into().unwrap()).into())))
        }
        DType::I64 => {
            Some(fold(&mut bytes.chunks_exact(8).map(|c| i64::from_ne_bytes(c.try_into().unwrap()))))
        }
        _ => None,
    }
}

/// The spec of `shape` and `dtype` when `bytes` fill it exactly (and, for bools, hold only 0 and
/// 1: other bytes are no bool XLA reads consistently); an error naming `op` otherwise.
pub(crate) fn checked_bytes(op: &'static str, bytes: &[u8], shape: &[usize], dtype: DType) -> Result<Spec> {
    let spec = Spec::new(shape, dtype);
    let Some((_, size)) = spec.checked_size() else {
        return Err(Error::shape(op, crate::ops::too_large(&spec)));
    };
    if size != bytes.len() {
        let msg = format!("{} bytes do not fill {spec} ({size} bytes)", bytes.len());
        return Err(Error::shape(op, msg));
    }
    if dtype == DType::Bool && bytes.iter().any(|&b| b > 1) {
        return Err(Error::invalid(op, "bool bytes must be 0 or 1"));
    }
    Ok(spec)
}
