//! `interact`, as ipywidgets' is used: a control per argument, drawn from an abbreviation (a
//! range makes a slider, a number a slider around it, a bool a checkbox, a string a text field,
//! a list of strings a dropdown, or a control given whole), and an Output under them; the
//! function runs once at the start and again whenever a control changes, its output (what it
//! prints and shows, and the value it returns) replacing the last. The [`interact!`] macro
//! writes the arguments as a closure's: `interact!(|batch: usize = 8..=256, lr: f32 = 1e-3| …)`.
//!
//! A drag does not queue a run per step: the front end sends a control's next change only when
//! the kernel is idle after the last and keeps just the newest meanwhile, and the kernel merges
//! changes of one control that do wait together, so a slow function runs for the newest values.
//!
//! [`interact!`]: crate::interact

use std::fmt::{Debug, Display};
use std::ops::RangeInclusive;
use std::sync::Arc;

use super::controls::{
    Checkbox, Dropdown, FloatLogSlider, FloatSlider, IntSlider, Output, Text, VBox, WidgetError,
};
use super::model::{run_into, Widget};

/// One argument's control: the widget, the state key that holds its value, and how to read
/// the value as the argument's type (through the control's own getter).
pub struct Control<T> {
    widget: Widget,
    key: &'static str,
    read: fn(&Widget) -> T,
}

impl<T> Control<T> {
    /// The control's widget.
    pub fn widget(&self) -> &Widget {
        &self.widget
    }

    /// The argument's value now.
    pub fn get(&self) -> T {
        (self.read)(&self.widget)
    }
}

/// What can stand for an argument of type `T`: an abbreviation, or a control.
pub trait IntoControl<T> {
    /// The control for the argument `name`.
    fn into_control(self, name: &str) -> Result<Control<T>, WidgetError>;
}

/// The control for argument `name` of type `T` from `spec` (what [`interact!`](crate::interact)
/// calls for each argument).
pub fn control<T, S: IntoControl<T>>(name: &str, spec: S) -> Result<Control<T>, WidgetError> {
    spec.into_control(name)
}

/// ipywidgets' range for a bare number: `-x..=3x` (`0..=1` for zero).
fn around(x: f64) -> (f64, f64) {
    if x == 0.0 {
        (0.0, 1.0)
    } else {
        (x.min(-x).min(3.0 * x), x.max(-x).max(3.0 * x))
    }
}

/// An integer slider at ipywidgets' start for a range: its middle, on a step.
fn int_slider(
    name: &str,
    min: i64,
    max: i64,
    step: Option<i64>,
    value: Option<i64>,
) -> Result<IntSlider, WidgetError> {
    let s = IntSlider::new(name, min..=max)?;
    let s = match step {
        Some(step) => s.with_step(step)?,
        None => s,
    };
    let step = step.unwrap_or(1);
    let mid = min + (max - min) / 2;
    Ok(s.with_value(value.unwrap_or(min + (mid - min) / step * step)))
}

/// An integer of any width as the `i64` a slider holds (saturated: `u64` past `i64::MAX`).
fn sat(x: i128) -> i64 {
    x.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

macro_rules! int_controls {
    ($($t:ty),*) => {$(
        impl IntoControl<$t> for RangeInclusive<$t> {
            fn into_control(self, name: &str) -> Result<Control<$t>, WidgetError> {
                let (a, b) = self.into_inner();
                int_slider(name, sat(a as i128), sat(b as i128), None, None)?.into_control(name)
            }
        }
        impl IntoControl<$t> for (RangeInclusive<$t>, $t) {
            fn into_control(self, name: &str) -> Result<Control<$t>, WidgetError> {
                let (a, b) = self.0.into_inner();
                int_slider(name, sat(a as i128), sat(b as i128), Some(sat(self.1 as i128)), None)?.into_control(name)
            }
        }
        impl IntoControl<$t> for $t {
            fn into_control(self, name: &str) -> Result<Control<$t>, WidgetError> {
                // ipywidgets' range around the number, within what the type holds.
                let (lo, hi) = around(self as f64);
                let lo = (lo as i64).max(sat(<$t>::MIN as i128));
                let hi = (hi as i64).min(sat(<$t>::MAX as i128));
                int_slider(name, lo, hi, None, Some(sat(self as i128)))?.into_control(name)
            }
        }
        impl IntoControl<$t> for IntSlider {
            fn into_control(self, _name: &str) -> Result<Control<$t>, WidgetError> {
                Ok(Control {
                    widget: self.widget().clone(),
                    key: "value",
                    read: |w| {
                        let v = IntSlider(w.clone()).value();
                        <$t>::try_from(v).unwrap_or(if v < 0 { <$t>::MIN } else { <$t>::MAX })
                    },
                })
            }
        }
    )*};
}

int_controls!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);

macro_rules! float_controls {
    ($($t:ty),*) => {$(
        impl IntoControl<$t> for RangeInclusive<$t> {
            fn into_control(self, name: &str) -> Result<Control<$t>, WidgetError> {
                let (a, b) = self.into_inner();
                let (a, b) = (a as f64, b as f64);
                FloatSlider::new(name, a..=b)?.with_value(a + (b - a) / 2.0).into_control(name)
            }
        }
        impl IntoControl<$t> for (RangeInclusive<$t>, $t) {
            fn into_control(self, name: &str) -> Result<Control<$t>, WidgetError> {
                let (a, b) = self.0.into_inner();
                let (a, b) = (a as f64, b as f64);
                FloatSlider::new(name, a..=b)?.with_step(self.1 as f64)?.with_value(a + (b - a) / 2.0).into_control(name)
            }
        }
        impl IntoControl<$t> for $t {
            fn into_control(self, name: &str) -> Result<Control<$t>, WidgetError> {
                let (lo, hi) = around(self as f64);
                FloatSlider::new(name, lo..=hi)?.with_value(self as f64).into_control(name)
            }
        }
        impl IntoControl<$t> for FloatSlider {
            fn into_control(self, _name: &str) -> Result<Control<$t>, WidgetError> {
                Ok(Control { widget: self.widget().clone(), key: "value", read: |w| FloatSlider(w.clone()).value() as $t })
            }
        }
        impl IntoControl<$t> for FloatLogSlider {
            fn into_control(self, _name: &str) -> Result<Control<$t>, WidgetError> {
                Ok(Control { widget: self.widget().clone(), key: "value", read: |w| FloatLogSlider(w.clone()).value() as $t })
            }
        }
    )*};
}

float_controls!(f32, f64);

impl IntoControl<bool> for bool {
    fn into_control(self, name: &str) -> Result<Control<bool>, WidgetError> {
        Checkbox::new(name, self).into_control(name)
    }
}

impl IntoControl<bool> for Checkbox {
    fn into_control(self, _name: &str) -> Result<Control<bool>, WidgetError> {
        Ok(Control { widget: self.widget().clone(), key: "value", read: |w| Checkbox(w.clone()).value() })
    }
}

impl IntoControl<String> for &str {
    fn into_control(self, name: &str) -> Result<Control<String>, WidgetError> {
        Text::new(name, self).into_control(name)
    }
}

impl IntoControl<String> for Text {
    fn into_control(self, _name: &str) -> Result<Control<String>, WidgetError> {
        Ok(Control { widget: self.widget().clone(), key: "value", read: |w| Text(w.clone()).value() })
    }
}

impl IntoControl<String> for Dropdown {
    fn into_control(self, _name: &str) -> Result<Control<String>, WidgetError> {
        Ok(Control { widget: self.widget().clone(), key: "index", read: |w| Dropdown(w.clone()).value() })
    }
}

impl<S: Into<String>, const N: usize> IntoControl<String> for [S; N] {
    fn into_control(self, name: &str) -> Result<Control<String>, WidgetError> {
        Dropdown::new(name, self)?.into_control(name)
    }
}

impl<S: Into<String>> IntoControl<String> for Vec<S> {
    fn into_control(self, name: &str) -> Result<Control<String>, WidgetError> {
        Dropdown::new(name, self)?.into_control(name)
    }
}

/// The controls of a function's arguments: a tuple of [`Control`]s.
pub trait Args: Send + Sync + 'static {
    /// The arguments' values, a tuple.
    type Values;
    /// The controls, in order, with the key each one's value is under.
    fn controls(&self) -> Vec<(Widget, &'static str)>;
    /// The values now.
    fn read(&self) -> Self::Values;
}

macro_rules! args_tuple {
    ($($t:ident $i:tt),*) => {
        impl<$($t: 'static),*> Args for ($(Control<$t>,)*) {
            type Values = ($($t,)*);
            fn controls(&self) -> Vec<(Widget, &'static str)> {
                vec![$((self.$i.widget.clone(), self.$i.key)),*]
            }
            fn read(&self) -> Self::Values {
                ($(self.$i.get(),)*)
            }
        }
    };
}

args_tuple!(A 0);
args_tuple!(A 0, B 1);
args_tuple!(A 0, B 1, C 2);
args_tuple!(A 0, B 1, C 2, D 3);
args_tuple!(A 0, B 1, C 2, D 3, E 4);
args_tuple!(A 0, B 1, C 2, D 3, E 4, F 5);

/// An `interact`'s widgets: its controls above its Output, in one box.
#[derive(Clone, PartialEq, Eq)]
pub struct Interactive {
    vbox: VBox,
    output: Output,
}

impl Debug for Interactive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.vbox)
    }
}

impl Interactive {
    /// The box holding the controls and the output.
    pub fn widget(&self) -> &Widget {
        self.vbox.widget()
    }

    /// Where the function's output goes.
    pub fn output(&self) -> &Output {
        &self.output
    }

    /// What a cell ending with it shows.
    pub fn bundle(&self) -> Vec<(String, String)> {
        self.vbox.bundle()
    }
}

/// Draws `args`' controls and an Output, runs `f` with their values into the Output, and again
/// at every change, each run's output replacing the last.
pub fn interact<A: Args>(
    args: A,
    f: impl Fn(A::Values) + Send + Sync + 'static,
) -> Result<Interactive, WidgetError> {
    let controls = args.controls();
    let output = Output::new();
    let mut children: Vec<&Widget> = controls.iter().map(|(w, _)| w).collect();
    children.push(output.widget());
    let vbox = VBox::new(children);
    let (args, f) = (Arc::new(args), Arc::new(f));
    for (w, key) in &controls {
        let (args, f) = (args.clone(), f.clone());
        w.observe_into(key, output.widget(), move |_| f(args.read()));
    }
    run_into(output.widget(), || f(args.read()));
    Ok(Interactive { vbox, output })
}

/// A function's result, to show in an `interact`'s Output (see [`ShowResult`], [`ShowValue`]).
pub struct Show<T>(pub T);

/// Shows a `Result` as a cell does: `Ok` as its value, `Err` as an error.
pub trait ShowResult {
    /// Prints it as the cell's output.
    fn show(self);
}

impl<T: Debug + 'static, E: Display + 'static> ShowResult for Show<Result<T, E>> {
    fn show(self) {
        crate::rich::print_result(self.0);
    }
}

/// Shows any other value as a cell ending with it does (nothing for `()`).
pub trait ShowValue {
    /// Prints it as the cell's output.
    fn show(self);
}

impl<T: Debug> ShowValue for &Show<T> {
    fn show(self) {
        crate::rich::print_bundle(&crate::rich::bundle_of(&self.0));
    }
}

/// Draws a control per argument of a closure and an Output under them; runs the closure's body
/// at once and whenever a control changes, showing its output and value in the Output (the
/// latest replacing the last), as ipywidgets' `interact`. Each argument is `name: type =
/// abbreviation`: a range (`8..=256`, or `(8..=256, 8)` with a step) makes a slider, a number a
/// slider around it (`-x..=3x`, as ipywidgets), a `bool` a checkbox, a string a text field, a list
/// of strings a dropdown, and a control (`FloatLogSlider::new("lr", 1e-5..=1e-1)?`) stands for
/// itself. An abbreviation ends at the next top-level `,` or `|`: one with either inside
/// (`f::<A, B>()`, `a | b`) goes in parentheses. A return type after the arguments (`| -> Result<Chart, Error> { … }`) lets the body
/// use `?`; a `Result` shows its `Ok` value or its error. It gives `Result<Interactive,
/// WidgetError>`; a cell ending with it shows the widgets.
///
/// ```
/// use eager_cell::interact;
/// let demo = interact!(|batch: usize = (8..=256, 8), scale: f32 = 1.5, label: String = ["a", "b"]| {
///     format!("{label}: {}", batch as f32 * scale)
/// })?;
/// // Run once at the start: batch 128 (the range's middle on a step), scale 1.5.
/// assert_eq!(demo.output().outputs()[0]["data"]["text/plain"], "\"a: 192\"");
/// let parsed = interact!(|text: String = "12",| -> Result<i64, std::num::ParseIntError> {
///     Ok(text.trim().parse::<i64>()? * 2)
/// })?;
/// assert_eq!(parsed.output().outputs()[0]["data"]["text/plain"], "24");
/// # Ok::<(), eager_cell::widgets::WidgetError>(())
/// ```
#[macro_export]
macro_rules! interact {
    (|| $($body:tt)*) => {
        compile_error!("interact! draws a control per argument: write |name: type = abbreviation, …| body")
    };
    (| $($rest:tt)*) => { $crate::__interact_arg!([] $($rest)*) };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __interact_arg {
    ([$($done:tt)*] $name:ident : $ty:ty = $($rest:tt)*) => {
        $crate::__interact_spec!([$($done)*] [$name $ty] [] $($rest)*)
    };
    // After a trailing comma.
    ([$($done:tt)*] | $($body:tt)*) => {
        $crate::__interact_build!([$($done)*] $($body)*)
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __interact_spec {
    ([$($done:tt)*] [$name:ident $ty:ty] [$($spec:tt)*] , $($rest:tt)*) => {
        $crate::__interact_arg!([$($done)* ($name, $ty, ($($spec)*))] $($rest)*)
    };
    ([$($done:tt)*] [$name:ident $ty:ty] [$($spec:tt)*] | $($body:tt)*) => {
        $crate::__interact_build!([$($done)* ($name, $ty, ($($spec)*))] $($body)*)
    };
    ([$($done:tt)*] [$name:ident $ty:ty] [$($spec:tt)*] $t:tt $($rest:tt)*) => {
        $crate::__interact_spec!([$($done)*] [$name $ty] [$($spec)* $t] $($rest)*)
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __interact_build {
    // A return type: the body runs as a closure of that type, so that `?` works in it.
    ([$(($name:ident, $ty:ty, ($($spec:tt)*)))*] -> $ret:ty { $($body:tt)* }) => {
        $crate::__interact_build!([$(($name, $ty, ($($spec)*)))*] (|| -> $ret { $($body)* })())
    };
    ([$(($name:ident, $ty:ty, ($($spec:tt)*)))*] $($body:tt)*) => {
        (|| -> ::std::result::Result<$crate::widgets::Interactive, $crate::widgets::WidgetError> {
            let args = ($($crate::widgets::interact::control::<$ty, _>(stringify!($name), $($spec)*)?,)*);
            $crate::widgets::interact::interact(args, move |($($name,)*): ($($ty,)*)| {
                #[allow(unused_imports)]
                use $crate::widgets::interact::{ShowResult as _, ShowValue as _};
                $crate::widgets::interact::Show({ $($body)* }).show();
            })
        })()
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::widgets::comm;

    #[test]
    fn abbreviations_make_the_controls_ipywidgets_makes() {
        comm::answer(|| {
            let c = control::<usize, _>("batch", 8..=256).unwrap();
            assert_eq!(
                (c.get(), c.widget().get("min"), c.widget().get("max")),
                (132, Some(8.into()), Some(256.into()))
            );
            let c = control::<usize, _>("batch", (8..=256, 8)).unwrap();
            assert_eq!(c.get(), 128, "the middle, on a step");
            let c = control::<i32, _>("n", 10).unwrap();
            assert_eq!(
                (c.get(), c.widget().get("min"), c.widget().get("max")),
                (10, Some((-10).into()), Some(30.into()))
            );
            let c = control::<u8, _>("n", 10).unwrap();
            assert_eq!(c.widget().get("min"), Some(0.into()), "unsigned: no negative start");
            let c = control::<u8, _>("n", 200).unwrap();
            assert_eq!(c.widget().get("max"), Some(255.into()), "no end past what the type holds");
            let c = control::<u64, _>("n", u64::MAX - 1..=u64::MAX).unwrap();
            assert_eq!(c.get(), u64::MAX >> 1, "saturated at i64::MAX, read back as such");
            let c = control::<f32, _>("lr", 1e-3).unwrap();
            assert_eq!(c.get(), 1e-3);
            let c = control::<String, _>("kind", ["relu", "gelu"]).unwrap();
            assert_eq!(c.get(), "relu");
            let c = control::<bool, _>("bias", true).unwrap();
            assert!(c.get());
            #[allow(clippy::reversed_empty_ranges)]
            let err = control::<usize, _>("batch", 256..=8).err().unwrap();
            assert!(err.to_string().contains("256..=8"), "{err}");
        });
    }
}
