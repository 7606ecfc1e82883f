//! The executor: one runtime (plugin + client) per device kind, started on first use, and
//! `execute`, which runs one op's executable now (found in the compile cache, loaded from
//! the persistent one or compiled) and tracks its completion. Transfers of buffers to and from
//! the host. It knows buffers and specs, not tensors: `tensor::dispatch` wraps what it makes.
//!
//! Its rooms: `start` (runtimes, defaults, random state, the interrupt flag), `completion`
//! (readiness, failures, index checks, `synchronize`), `program` (one key's program at one
//! tier: text, options, load or compile), `fetch` (executables from memory, disk or compile;
//! fetch-ahead; running compiles), `tiers` (background promotion to the optimized tier),
//! `exit` (the exit guard that stops the background work), `execute` (launches and their
//! booking), `transfer` (uploads, downloads, copies). Everything outside uses the names
//! re-exported here.

mod completion;
mod execute;
mod exit;
mod fetch;
mod program;
mod start;
mod tiers;
mod transfer;

pub use completion::synchronize;
pub(crate) use completion::Completion;
pub(crate) use execute::{execute, execute_partitioned, Arg};
pub(crate) use fetch::{executable, fetch_ahead};
pub use fetch::{on_compile_end, running_compiles, RunningCompile};
pub(crate) use start::{check_interrupt, next_rng_state};
pub use start::{
    default_device, describe_devices, device_memory_stats, devices, manual_seed, preloaded, runtime,
    set_default_device, set_interrupted, set_plugin_path, Runtime,
};
pub use tiers::{background_compile, wait_for_promotions};
pub(crate) use transfer::{copy_to_device, download, upload, Source};
