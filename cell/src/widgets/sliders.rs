//! The sliders of `@jupyter-widgets/controls` 2.0: over integers, over floats, and over floats
//! on a log scale; each reads and sets its value as a Rust number, clamped into its range as
//! ipywidgets clamps, and runs callbacks when it moves.

use std::ops::RangeInclusive;

use serde_json::json;

use super::controls::{
    as_f64, as_i64, check_range, open_dom, FloatLogSlider, FloatSlider, IntSlider, Output, WidgetError,
    CONTROLS,
};

impl IntSlider {
    /// A slider from `range`'s start to its end, step 1, at the start.
    pub fn new(description: &str, range: RangeInclusive<i64>) -> Result<IntSlider, WidgetError> {
        let (min, max) = range.into_inner();
        check_range("IntSlider", description, min as f64, max as f64)?;
        Ok(IntSlider(open_dom(
            CONTROLS,
            "2.0.0",
            "IntSlider",
            Some("SliderStyleModel"),
            json!({"description": description, "min": min, "max": max, "step": 1, "value": min,
                   "behavior": "drag-tap", "continuous_update": true, "orientation": "horizontal",
                   "readout": true, "readout_format": "d", "disabled": false, "description_allow_html": false}),
        )))
    }

    /// At `value` (clamped into the range, as ipywidgets clamps).
    pub fn with_value(self, value: i64) -> IntSlider {
        self.set_value(value);
        self
    }

    /// Moving in steps of `step` (from the range's start).
    pub fn with_step(self, step: i64) -> Result<IntSlider, WidgetError> {
        if step <= 0 {
            let description = self.description();
            return Err(WidgetError::BadStep { widget: "IntSlider", description, step: step as f64 });
        }
        self.0.set("step", json!(step));
        Ok(self)
    }

    /// The value now (as the front end last set it, or the session).
    pub fn value(&self) -> i64 {
        self.0.get("value").map_or(0, |v| as_i64(&v))
    }

    /// Moves the slider (clamped into its range); callbacks run.
    pub fn set_value(&self, value: i64) {
        let (min, max) = (
            self.0.get("min").map_or(i64::MIN, |v| as_i64(&v)),
            self.0.get("max").map_or(i64::MAX, |v| as_i64(&v)),
        );
        self.0.set("value", json!(value.clamp(min, max)));
    }

    /// Runs `f` with the new value at each change; its output goes under the front end's message (JupyterLab's log console; see the `_into` form).
    pub fn on_change(&self, f: impl Fn(i64) + Send + Sync + 'static) {
        self.0.observe("value", move |v| f(as_i64(v)));
    }

    /// Runs `f` at each change, its output replacing `out`'s content.
    pub fn on_change_into(&self, out: &Output, f: impl Fn(i64) + Send + Sync + 'static) {
        self.0.observe_into("value", out, move |v| f(as_i64(v)));
    }

    fn description(&self) -> String {
        self.0.get_str("description")
    }

    pub(super) fn text(&self) -> String {
        let g = |k: &str| self.0.get(k).map_or(0, |v| as_i64(&v));
        format!("IntSlider({} = {}, {}..={})", self.description(), g("value"), g("min"), g("max"))
    }
}

/// The float sliders' shared parts (value, callbacks, text).
macro_rules! float_value {
    ($name:ident) => {
        impl $name {
            /// The value now.
            pub fn value(&self) -> f64 {
                self.0.get("value").map_or(0.0, |v| as_f64(&v))
            }

            /// Runs `f` with the new value at each change; its output goes under the front end's message (JupyterLab's log console; see the `_into` form).
            pub fn on_change(&self, f: impl Fn(f64) + Send + Sync + 'static) {
                self.0.observe("value", move |v| f(as_f64(v)));
            }

            /// Runs `f` at each change, its output replacing `out`'s content.
            pub fn on_change_into(&self, out: &Output, f: impl Fn(f64) + Send + Sync + 'static) {
                self.0.observe_into("value", out, move |v| f(as_f64(v)));
            }

            /// At `value` (clamped into the range).
            pub fn with_value(self, value: f64) -> $name {
                self.set_value(value);
                self
            }

            fn description(&self) -> String {
                self.0.get_str("description")
            }

            pub(super) fn text(&self) -> String {
                let (lo, hi) = self.bounds();
                format!("{}({} = {}, {lo}..={hi})", stringify!($name), self.description(), self.value())
            }
        }
    };
}

float_value!(FloatSlider);
float_value!(FloatLogSlider);

impl FloatSlider {
    /// A slider over `range` in 100 steps, at its start.
    pub fn new(description: &str, range: RangeInclusive<f64>) -> Result<FloatSlider, WidgetError> {
        let (min, max) = range.into_inner();
        check_range("FloatSlider", description, min, max)?;
        let step = if max > min { (max - min) / 100.0 } else { 0.1 };
        Ok(FloatSlider(open_dom(
            CONTROLS,
            "2.0.0",
            "FloatSlider",
            Some("SliderStyleModel"),
            json!({"description": description, "min": min, "max": max, "step": step, "value": min,
                   "behavior": "drag-tap", "continuous_update": true, "orientation": "horizontal",
                   "readout": true, "readout_format": ".3g", "disabled": false, "description_allow_html": false}),
        )))
    }

    /// Moving in steps of `step`.
    pub fn with_step(self, step: f64) -> Result<FloatSlider, WidgetError> {
        if !step.is_finite() || step <= 0.0 {
            return Err(WidgetError::BadStep {
                widget: "FloatSlider",
                description: self.description(),
                step,
            });
        }
        self.0.set("step", json!(step));
        Ok(self)
    }

    /// Moves the slider (clamped into its range); callbacks run. NaN leaves it where it is.
    pub fn set_value(&self, value: f64) {
        if value.is_nan() {
            return;
        }
        let (lo, hi) = self.bounds();
        self.0.set("value", json!(value.clamp(lo, hi)));
    }

    fn bounds(&self) -> (f64, f64) {
        (self.0.get("min").map_or(0.0, |v| as_f64(&v)), self.0.get("max").map_or(0.0, |v| as_f64(&v)))
    }
}

impl FloatLogSlider {
    /// A slider over the values of `range` (both above 0) on a log scale, ten steps a decade,
    /// at its start. (ipywidgets' `min` and `max` are exponents; here they are the values.)
    pub fn new(description: &str, range: RangeInclusive<f64>) -> Result<FloatLogSlider, WidgetError> {
        let (min, max) = range.into_inner();
        check_range("FloatLogSlider", description, min, max)?;
        if min <= 0.0 {
            return Err(WidgetError::NotPositive { description: description.into(), min, max });
        }
        Ok(FloatLogSlider(open_dom(
            CONTROLS,
            "2.0.0",
            "FloatLogSlider",
            Some("SliderStyleModel"),
            json!({"description": description, "min": min.log10(), "max": max.log10(), "step": 0.1, "base": 10.0,
                   "value": min, "behavior": "drag-tap", "continuous_update": true, "orientation": "horizontal",
                   "readout": true, "readout_format": ".3g", "disabled": false, "description_allow_html": false}),
        )))
    }

    /// Moves the slider (clamped into its range, on the log scale: a value inside stays as
    /// given); callbacks run. NaN, zero or less leave it where it is.
    pub fn set_value(&self, value: f64) {
        if value.is_nan() || value <= 0.0 {
            return;
        }
        let e = |k: &str| self.0.get(k).map_or(0.0, |v| as_f64(&v));
        let (lo, hi) = (e("min"), e("max"));
        let exponent = value.log10();
        let value = if exponent < lo {
            10f64.powf(lo)
        } else if exponent > hi {
            10f64.powf(hi)
        } else {
            value
        };
        self.0.set("value", json!(value));
    }

    fn bounds(&self) -> (f64, f64) {
        let e = |k: &str| self.0.get(k).map_or(0.0, |v| as_f64(&v));
        (10f64.powf(e("min")), 10f64.powf(e("max")))
    }
}
