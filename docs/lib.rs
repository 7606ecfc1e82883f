//! # eager-guide
//!
//! The guide in `docs/src/` (an mdBook: `mdbook build docs`) as doctests: each chapter is the
//! documentation of one module below, so `cargo test --release -p eager-guide --doc` (and CI's
//! `cargo test --release --workspace`) compiles and runs every Rust snippet in it on the CPU
//! device, and the guide stays true. Snippets that need a REPL's meta commands or a notebook
//! are `text`, `sh` or `ignore` blocks with the reason beside them. The crate has no code.

#![warn(missing_docs)]

/// The chapters, one module each (compiled only for doctests).
#[cfg(doctest)]
pub mod chapters {
    #[doc = include_str!("../README.md")]
    pub mod readme {}
    #[doc = include_str!("src/introduction.md")]
    pub mod introduction {}
    #[doc = include_str!("src/getting-started.md")]
    pub mod getting_started {}
    #[doc = include_str!("src/repl.md")]
    pub mod repl {}
    #[doc = include_str!("src/jupyter.md")]
    pub mod jupyter {}
    #[doc = include_str!("src/tensors.md")]
    pub mod tensors {}
    #[doc = include_str!("src/training.md")]
    pub mod training {}
    #[doc = include_str!("src/compiled.md")]
    pub mod compiled {}
    #[doc = include_str!("src/speed.md")]
    pub mod speed {}
    #[doc = include_str!("src/memory.md")]
    pub mod memory {}
    #[doc = include_str!("src/profiling.md")]
    pub mod profiling {}
    #[doc = include_str!("src/devices.md")]
    pub mod devices {}
    #[doc = include_str!("src/multi-device.md")]
    pub mod multi_device {}
    #[doc = include_str!("src/models.md")]
    pub mod models {}
    #[doc = include_str!("src/mixed-precision.md")]
    pub mod mixed_precision {}
    #[doc = include_str!("src/serving.md")]
    pub mod serving {}
    #[doc = include_str!("src/architecture.md")]
    pub mod architecture {}
}
