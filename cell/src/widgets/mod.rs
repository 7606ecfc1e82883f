//! Jupyter widgets from Rust cells: the models of `@jupyter-widgets/controls` and
//! `@jupyter-widgets/output` (ipywidgets 8's protocol, version 2.1.0), which JupyterLab's widget
//! manager (`jupyterlab_widgets`) draws, their state kept in step both ways over Jupyter comms;
//! Rust callbacks that run in the session when a value changes; and [`interact!`](crate::interact).
//!
//! A cell makes a widget and ends with it (or puts it in a box); moving it in the notebook runs
//! its callbacks in the session, with what they captured:
//!
//! ```
//! use eager_cell::widgets::{IntSlider, Output, VBox};
//! let batch = IntSlider::new("batch", 8..=256)?.with_step(8)?.with_value(64);
//! let out = Output::new();
//! batch.on_change_into(&out, |b| println!("batch {b}: {} steps an epoch", 60_000 / b));
//! batch.set_value(128); // as a drag in the notebook does: the callback runs
//! assert_eq!(out.outputs()[0]["text"], "batch 128: 468 steps an epoch\n");
//! let ui = VBox::new([batch.widget(), out.widget()]);
//! # Ok::<(), eager_cell::widgets::WidgetError>(())
//! ```
//!
//! How it travels: a cell's comm messages are [`COMM_MARKER`] lines on its stdout, which the
//! kernel sends on iopub at once; a front end's comm message reaches the session through its
//! control socket ([`answer`]), and what that sends back goes out as the message's children. A
//! callback's output (what it prints and shows, its error, a panic caught) goes to its Output
//! widget, or under the front end's message (which JupyterLab shows in its log console). In the
//! terminal REPL a widget shows as text.

mod capture;
mod comm;
mod controls;
pub mod interact;
mod model;
mod sliders;

use std::any::TypeId;

pub use comm::{CommKind, CommLine, COMM_MARKER};
pub use controls::{
    Button, Checkbox, Dropdown, FloatLogSlider, FloatSlider, HBox, IntSlider, Label, Output, Text, VBox,
    WidgetError,
};
pub use interact::Interactive;
pub use model::{answer, Widget, CONTROL_TARGET, PROTOCOL_VERSION, WIDGET_TARGET, WIDGET_VIEW_MIME};

/// The view bundle of the widget at `p` when its type (`id`) is one of this module's.
///
/// # Safety
/// `p` points to a live value whose type has the `TypeId` `id`.
pub(crate) unsafe fn bundle_of_widget(id: TypeId, p: *const ()) -> Option<Vec<(String, String)>> {
    macro_rules! arms {
        ($($t:ty),*) => {
            $(if id == TypeId::of::<$t>() {
                // SAFETY: `id` is the id of `$t` (the caller's promise).
                return Some(unsafe { &*(p as *const $t) }.bundle());
            })*
        };
    }
    arms!(
        IntSlider,
        FloatSlider,
        FloatLogSlider,
        Dropdown,
        Checkbox,
        Button,
        Text,
        Label,
        Output,
        HBox,
        VBox,
        Interactive
    );
    if id == TypeId::of::<Widget>() {
        // SAFETY: as above.
        let w = unsafe { &*(p as *const Widget) };
        return Some(w.view_bundle(controls::text_of_model(w.clone())));
    }
    None
}
