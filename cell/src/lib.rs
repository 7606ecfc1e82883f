//! # eager-cell
//!
//! What the cells of an eager REPL or notebook session link (the role `evcxr_runtime` plays
//! for evcxr): the session's preload adds it with `:dep`, brings [`EvcxrDisplay`] and
//! [`EvcxrResultDisplay`] into scope and calls [`attach`]. The host's side of the same
//! session is `repl::Session`, in the front end's own process.
//!
//! - **Rich output**: evcxr reads `EVCXR_BEGIN_CONTENT <mime>` … `EVCXR_END_CONTENT` blocks
//!   from a cell's stdout; [`show`] and [`show_all`] write them, and only this file spells
//!   them out ([`content_block`]). The display traits show a value that ends a cell: eager's
//!   and viz's types through their own renderers (a tensor's text and HTML, a chart's SVG, …),
//!   anything else with `Debug`, and an `Err` as the cell's error ([`ERROR_MIME`]).
//! - **Notebook requests**: [`clear_output`] ([`CLEAR_OUTPUT_MARKER`]).
//! - **Live displays** ([`DisplayHandle`], [`Progress`], [`LiveChart`]): shown at once and
//!   updated in place while the cell runs ([`DISPLAY_MARKER`] lines: the kernel sends
//!   `display_data` with a `display_id`, then `update_display_data`); and the compile
//!   heartbeat, a live line while a compile runs past a second.
//! - **Widgets** ([`widgets`], [`interact!`]): sliders, dropdowns, buttons, Output areas and
//!   boxes of ipywidgets 8, drawn by JupyterLab's widget manager, whose changes run Rust
//!   callbacks in the session.
//! - **The control socket** ([`attach`], [`CONTROL_SOCKET_ENV`]): the host reads the profiler
//!   log and the cache through it, sets the default device and interrupts a running cell.
//!
//! This crate sits above eager and viz, not below: they are libraries for any program and
//! print nothing for notebooks; the one crate that knows evcxr's protocol knows their types.
//!
//! In a cell (the session has brought the traits into scope and attached), a value that ends
//! the cell shows itself; live displays update while the cell runs:
//!
//! ```
//! use eager::prelude::*;
//! use eager_cell::{EvcxrDisplay, LiveChart, Progress};
//! let t = Tensor::arange(0.0, 4.0, 1.0, DType::F32)?;
//! t.evcxr_display(); // what a cell ending in `t` shows: its text and an HTML table
//! let mut bar = Progress::new("steps", 3);
//! let mut chart = LiveChart::new("loss", "step", "loss").every(2);
//! for step in 0..3 {
//!     chart.push(1.0 / (1.0 + step as f64));
//!     bar.inc();
//! }
//! bar.finish();
//! chart.finish();
//! # Ok::<(), eager::Error>(())
//! ```
//!
//! Outside a session the same calls print their text and markers to standard output. The
//! guide's chapter "Jupyter" (`docs/src/jupyter.md`) has more.

#![warn(missing_docs)]

mod control;
mod display;
mod live;
mod rich;
mod trim;
pub mod widgets;

use std::io::Write;

pub use control::{attach, CONTROL_SOCKET_ENV};
pub use display::{EvcxrDisplay, EvcxrResultDisplay};
pub use live::{DisplayHandle, DisplayLine, LiveChart, Progress, DISPLAY_MARKER};
pub use trim::trim_cell_libraries;

/// One block of rich output as evcxr reads it from a cell's stdout: `body` shown as `mime`
/// (one per MIME type per cell: a later block of the same type replaces it).
pub fn content_block(mime: &str, body: &str) -> String {
    format!("EVCXR_BEGIN_CONTENT {mime}\n{body}\nEVCXR_END_CONTENT")
}

/// Shows `body` as `mime` in the cell's output (`image/png` as base64).
pub fn show(mime: &str, body: &str) {
    show_all(&[(mime, body)]);
}

/// Shows one value as several MIME types at once (`text/plain` and `text/html`, …): the front
/// end picks the richest it can show.
pub fn show_all(bundle: &[(&str, &str)]) {
    let mut out = std::io::stdout().lock();
    for (mime, body) in bundle {
        let _ = writeln!(out, "{}", content_block(mime, body));
    }
}

/// The MIME type of the block a cell prints when it failed: JSON `{"ename", "evalue"}`
/// (`evalue` absent in the block the REPL's cell process writes for a `?` or a panic, whose
/// message went to stderr).
pub const ERROR_MIME: &str = "application/vnd.eager.error+json";

/// A cell's error block (see [`ERROR_MIME`]); `evalue` `None` when the message went to stderr.
pub fn error_block(ename: &str, evalue: Option<&str>) -> String {
    let v = match evalue {
        Some(evalue) => serde_json::json!({ "ename": ename, "evalue": evalue }),
        None => serde_json::json!({ "ename": ename }),
    };
    content_block(ERROR_MIME, &v.to_string())
}

/// Prints a cell's error block (see [`ERROR_MIME`]).
pub fn print_error_block(ename: &str, evalue: &str) {
    println!("{}", error_block(ename, Some(evalue)));
}

/// A line a cell prints to ask a notebook to clear its output (Jupyter's `clear_output`).
pub const CLEAR_OUTPUT_MARKER: &str = "EAGER_CLEAR_OUTPUT";

/// Clears the cell's output in a notebook (an animation's frame, a progress line). In the
/// terminal REPL it does nothing.
pub fn clear_output() {
    println!("{CLEAR_OUTPUT_MARKER}");
    let _ = std::io::stdout().flush();
}
