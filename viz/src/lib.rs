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
//!   numbers ([`Table`], [`Row`]): one row per op, input specs and placement (a device or a
//!   mesh); wall % counts overlapping dispatches once ([`Profile::busy_ns`],
//!   [`Table::overlap_ns`]).
//! - charts: [`Profile::timeline`], [`Profile::compile_vs_execute`], [`Profile::cache_hits`],
//!   each a [`Chart`] with [`Chart::svg`], [`Chart::png`], [`Chart::write_svg`],
//!   [`Chart::write_png`]. Timelines cut idle stretches ([`Profile::idle_gaps`], past
//!   [`IDLE_GAP_MIN`] and [`IDLE_GAP_SHARE`] of the busy time) to marked breaks that give
//!   their length, and name a session's cells ([`Profile::with_cells`]);
//!   [`Chart::true_time`] keeps the true time axis. Colours and fonts live in [`style`]; PNG text comes from DejaVu
//!   Sans embedded in the binary, so no system font library is needed.
//! - comparison: [`compare`] puts named profiles side by side (say a training run
//!   dispatched op by op and the same run compiled into one program per step): a
//!   [`Comparison`] with [`Comparison::text`], [`Comparison::html`], the figures per run
//!   ([`RunSummary`]) and a chart of one lane per run on a shared time axis, the same short
//!   window of each run, and the totals.
//! - line charts: [`line_chart`] draws named series against step (loss curves), a
//!   [`LineChart`]; [`LineChart::series_xy`] for other x, [`LineChart::log_y`] for a log scale.
//!
//!   Charts, comparisons and line charts all draw with `svg`, `png`, `write_svg`,
//!   `write_png` and `as_png`, and show themselves when they end an evcxr cell (the
//!   `eager-cell` crate, which cells link, renders them with these methods):
//!
//! ```no_run
//! # let (eager_run, compiled_run) = (viz::Profile::default(), viz::Profile::default());
//! # let (eager_loss, compiled_loss) = (vec![2.3f32, 0.9], vec![2.3f32, 0.9]);
//! viz::line_chart("Training loss", "step", "loss", &[("eager", &eager_loss), ("compiled", &compiled_loss)])
//!     .write_png("loss.png")?;
//! let cmp = viz::compare(&[("eager", &eager_run), ("compiled", &compiled_run)]).steps(2);
//! println!("{}", cmp.text());
//! cmp.write_png("compare.png")?;
//! # Ok::<(), viz::Error>(())
//! ```
//! - memory: [`memory_chart`] draws eager's memory ledger (`eager::memory`): live bytes over
//!   time, the peak marked, the largest tensors at the peak with the ops that made them
//!   ([`MemoryChart`], [`MemoryChart::text`]).
//! - trace: [`Profile::trace_json`], [`Profile::write_trace`] (Perfetto, `chrome://tracing`).
//! - hint: [`Profile::hints`], one line each, past [`RECOMPILE_THRESHOLD`] shapes per op.

#![warn(missing_docs)]

mod chart;
mod error;
mod gaps;
mod hint;
mod profile;
pub mod style;
mod table;
mod trace;
mod units;

pub use chart::{
    compare, line_chart, memory_chart, Chart, ChartKind, Comparison, LineChart, MemoryChart, PngImage,
    RunSummary,
};
pub use error::{Error, Result};
pub use gaps::{IdleGap, IDLE_GAP_MIN, IDLE_GAP_SHARE};
pub use hint::{Hint, RECOMPILE_THRESHOLD};
pub use profile::{profile, start, Profile, Recorder};
pub use table::{Row, SpmdSummary, Table, TierSummary, TABLE_ROWS};
