//! How a value that ends a cell shows: evcxr compiles `(value).evcxr_display();` first and
//! falls back to `Debug` in a second compile when there is no such method. A widget shows as
//! its view (`widgets`); everything else in its rich form (`rich`).

use std::fmt::Debug;

use crate::rich::{bundle_of, print_bundle, print_result};

/// Shows any `Debug` value that ends a REPL cell in one compile; eager's and viz's types with
/// a rich form (a tensor, cache stats, a profile, a chart, a comparison, a PNG) show that, a
/// widget its control.
pub trait EvcxrDisplay {
    /// Shows `self` as the value of the cell: its rich form per MIME type, or its `Debug` text.
    fn evcxr_display(&self);
}

// `typeid::of`, not `TypeId::of`: a value ending a cell often borrows (a chart its profile),
// and a `TypeId` does not depend on lifetimes.
impl<T: Debug + ?Sized> EvcxrDisplay for T {
    fn evcxr_display(&self) {
        // SAFETY: the pointer is `self`'s and the id is `T`'s.
        let widget =
            unsafe { crate::widgets::bundle_of_widget(typeid::of::<T>(), self as *const T as *const ()) };
        print_bundle(&widget.unwrap_or_else(|| bundle_of(self)));
    }
}

/// Shows a `Result` that ends a cell as torch users expect: `Ok` as its value (a tensor with
/// its values and HTML table), `Err` as the cell's error (Jupyter's error reply). Taken by
/// value, so it wins over [`EvcxrDisplay`] (which takes `&self`) for `Result`s.
pub trait EvcxrResultDisplay {
    /// Shows `Ok` as the cell's value, or fails the cell with `Err` (its kind and message).
    fn evcxr_display(self);
}

impl<T: Debug + 'static, E: std::fmt::Display + 'static> EvcxrResultDisplay for Result<T, E> {
    fn evcxr_display(self) {
        match self {
            Ok(v) => EvcxrDisplay::evcxr_display(&v),
            Err(e) => print_result::<(), E>(Err(e)),
        }
    }
}
