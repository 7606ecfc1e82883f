//! # eager
//!
//! Eager execution of tensor ops on XLA devices (CPU, TPU, NVIDIA GPU) through the PJRT C
//! API. Every op runs at once: its key (op, attributes, input shapes and dtypes, device)
//! finds a compiled one-op StableHLO executable in the cache, or compiles one.
//!
//! ```no_run
//! use eager::prelude::*;
//! let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
//! let b = (&a + &a).exp()?;
//! println!("{b}\n{}", eager::cache::stats());
//! # Ok::<(), eager::Error>(())
//! ```
//!
//! Map, in layers (bottom up; no module imports one above it, and none import each other in a
//! circle: `tests/layers.rs` checks): [`dtype`], [`shape`], [`device`], [`shared`]
//! (process-wide state) → [`pjrt`] (FFI and safe handles), [`plugin`] (finding plugins per
//! device target), [`error`] → [`memory`] (live tensor bytes, the peak, the cap),
//! [`autocast`](mod@autocast) (its scopes; the ops say their lists) → [`ops`] (one file per
//! op family) → [`mesh`] (meshes and shardings: bookkeeping) → [`cache`] (in memory),
//! [`disk_cache`] (persistent), [`profiler`] (the event log the viz crate draws) →
//! [`runtime`] (plugins, execute, transfers) → [`tensor`] (its dispatch, its autograd state,
//! the recording of traced ops) → [`autograd`] (the backward pass), [`var`] →
//! [`compile`](mod@compile) (a function traced into one program) → [`nn`], [`optim`], [`io`]
//! (safetensors and .npy files).

#![warn(missing_docs)]

pub mod autocast;
pub mod autograd;
pub mod cache;
pub mod compile;
pub mod device;
pub mod disk_cache;
pub mod dtype;
pub mod error;
pub mod io;
pub mod memory;
pub mod mesh;
pub mod nn;
pub mod ops;
pub mod optim;
pub mod pjrt;
pub mod plugin;
pub mod profiler;
pub mod runtime;
pub mod shape;
pub mod shared;
pub mod tensor;
pub mod var;

pub use autocast::{autocast, autocast_dtype, set_autocast, AutocastGuard};
pub use autograd::{no_grad, NoGradGuard};
pub use compile::{
    compile, end_fused_region, fused, fused_mode, ops_as_one, set_fused_mode, set_ops_as_one, Compiled,
};
pub use device::{Device, DeviceKind};
pub use dtype::{DType, Element};
pub use error::{Error, Result};
pub use mesh::{Mesh, PartitionSpec, Sharding};
pub use ops::Padding;
pub use runtime::{default_device, devices, manual_seed, set_default_device, set_plugin_path, synchronize};
pub use shape::Spec;
pub use tensor::{dispatch, Reduction, Tensor};
pub use var::Var;

/// What a notebook or REPL cell wants in scope.
pub mod prelude {
    pub use crate::autograd::no_grad;
    pub use crate::compile::compile;
    pub use crate::device::{Device, DeviceKind};
    pub use crate::dtype::DType;
    pub use crate::error::{Error, Result};
    pub use crate::mesh::{Mesh, PartitionSpec};
    pub use crate::nn::Module;
    pub use crate::ops::Padding;
    pub use crate::optim::Optimizer;
    pub use crate::runtime::{manual_seed, set_default_device, synchronize};
    pub use crate::tensor::Tensor;
    pub use crate::var::Var;
    pub use crate::{cache, nn, optim, profiler};
}
