//! # viz
//!
//! Profiling views of eager dispatch: what the core's profiler recorded, as a per-op table
//! (text or HTML), charts (SVG or PNG, drawn with plotters), a Chrome trace-event JSON file
//! for Perfetto or `chrome://tracing`, and a hint when an op recompiles for shape churn.
//!
//! ```no_run
//! use eager::prelude::*;
//! let (y, p) = viz::profile(|| -> Result<Tensor> {
//!     let x = Tensor::randn(&[64, 64], DType::F32)?;
//!     x.matmul(&x)?.relu()
//! });
//! y?;
//! println!("{}", p.table_text());
//! p.timeline().write_png("timeline.png")?;
//! p.write_trace("trace.json")?;
//! for hint in p.hints() {
//!     println!("{hint}");
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Map:
//! - capture: [`profile`] around a closure, [`start`] / [`Recorder::stop`] across REPL or
//!   notebook cells, [`Profile::session`] for the whole log, [`Profile::from_events`] for
//!   events from anywhere (a `Profile` is built from [`eager::profiler::Event`]s alone).
//!   The log is process-wide: a capture also holds what other threads dispatched meanwhile.
//! - table: [`Profile::table_text`], [`Profile::table_html`], or [`Profile::table`] for the
//!   numbers ([`Table`], [`Row`]).
//! - charts: [`Profile::timeline`], [`Profile::compile_vs_execute`], [`Profile::cache_hits`],
//!   each a [`Chart`] with [`Chart::svg`], [`Chart::png`], [`Chart::write_svg`],
//!   [`Chart::write_png`]. Colours and fonts live in [`style`]; PNG text comes from DejaVu
//!   Sans embedded in the binary, so no system font library is needed.
//! - trace: [`Profile::trace_json`], [`Profile::write_trace`] (Perfetto, `chrome://tracing`).
//! - hint: [`Profile::hints`], one line each, past [`RECOMPILE_THRESHOLD`] shapes per op.

mod chart;
mod error;
mod hint;
mod profile;
pub mod style;
mod table;
mod trace;
mod units;

pub use chart::{Chart, ChartKind, PngImage};
pub use error::{Error, Result};
pub use hint::{Hint, RECOMPILE_THRESHOLD};
pub use profile::{profile, start, Profile, Recorder};
pub use table::{Row, Table, TABLE_ROWS};
