//! The controls of `@jupyter-widgets/controls` 2.0 and the Output widget of
//! `@jupyter-widgets/output` 1.0, as typed handles over [`Widget`]: each opens its model with
//! the state ipywidgets 8 gives it (its layout and style models too), reads and sets its value
//! in Rust types, and runs Rust callbacks when the value changes. Every handle derefs to its
//! [`Widget`] (observe any key, close, its id).

use std::ops::Deref;

use serde_json::{json, Map, Value};

use super::capture;
use super::model::Widget;

pub(super) const CONTROLS: &str = "@jupyter-widgets/controls";
const BASE: &str = "@jupyter-widgets/base";
const OUTPUT: &str = "@jupyter-widgets/output";

/// A widget's arguments that cannot make a control.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WidgetError {
    /// A range whose start is past its end (or not finite).
    #[error("{widget} {description:?}: the range {min}..={max} is empty (min must not exceed max)")]
    EmptyRange {
        /// The control.
        widget: &'static str,
        /// Its description.
        description: String,
        /// The range's start.
        min: f64,
        /// The range's end.
        max: f64,
    },
    /// A log slider's range must be positive.
    #[error("FloatLogSlider {description:?}: the range {min}..={max} must be above 0 (it is drawn on a log scale)")]
    NotPositive {
        /// Its description.
        description: String,
        /// The range's start.
        min: f64,
        /// The range's end.
        max: f64,
    },
    /// A step of zero or less.
    #[error("{widget} {description:?}: step {step} must be above 0")]
    BadStep {
        /// The control.
        widget: &'static str,
        /// Its description.
        description: String,
        /// The step given.
        step: f64,
    },
    /// A dropdown needs options, and a value among them.
    #[error("Dropdown {description:?}: {why}")]
    BadOption {
        /// Its description.
        description: String,
        /// What was wrong.
        why: String,
    },
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// Opens a DOM widget's model: its layout model and (when it has one) its style model first, as
/// ipywidgets does, then the model with the common fields and `state`.
pub(super) fn open_dom(module: &str, version: &str, name: &str, style: Option<&str>, state: Value) -> Widget {
    let layout = Widget::open(obj(json!({
        "_model_module": BASE, "_model_module_version": "2.0.0", "_model_name": "LayoutModel",
        "_view_module": BASE, "_view_module_version": "2.0.0", "_view_name": "LayoutView", "_view_count": null,
    })));
    let mut full = obj(json!({
        "_dom_classes": [], "_model_module": module, "_model_module_version": version,
        "_model_name": format!("{name}Model"), "_view_module": module, "_view_module_version": version,
        "_view_name": format!("{name}View"), "_view_count": null, "layout": layout.reference(), "tabbable": null,
        "tooltip": null,
    }));
    if let Some(style) = style {
        let style = Widget::open(obj(json!({
            "_model_module": CONTROLS, "_model_module_version": "2.0.0", "_model_name": style,
            "_view_module": BASE, "_view_module_version": "2.0.0", "_view_name": "StyleView",
            "_view_count": null, "description_width": "",
        })));
        full.insert("style".into(), Value::String(style.reference()));
    }
    full.extend(obj(state));
    Widget::open(full)
}

pub(super) fn as_i64(v: &Value) -> i64 {
    v.as_i64().or_else(|| v.as_f64().map(|f| f.round() as i64)).unwrap_or(0)
}

pub(super) fn as_f64(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

pub(super) fn check_range(
    widget: &'static str,
    description: &str,
    min: f64,
    max: f64,
) -> Result<(), WidgetError> {
    // Written so that NaN fails too.
    if min <= max && min.is_finite() && max.is_finite() {
        Ok(())
    } else {
        Err(WidgetError::EmptyRange { widget, description: description.into(), min, max })
    }
}

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq)]
        pub struct $name(pub(super) Widget);

        impl Deref for $name {
            type Target = Widget;
            fn deref(&self) -> &Widget {
                &self.0
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.text())
            }
        }

        impl $name {
            /// The model it is a handle of.
            pub fn widget(&self) -> &Widget {
                &self.0
            }

            /// What a cell ending with it shows: the control, or its text without widgets.
            pub fn bundle(&self) -> Vec<(String, String)> {
                self.0.view_bundle(self.text())
            }
        }
    };
}

handle!(
    /// A slider over integers (ipywidgets' `IntSlider`).
    IntSlider
);
handle!(
    /// A slider over floats (ipywidgets' `FloatSlider`).
    FloatSlider
);
handle!(
    /// A slider over floats on a log scale (ipywidgets' `FloatLogSlider`, base 10).
    FloatLogSlider
);
handle!(
    /// A choice of one among labels (ipywidgets' `Dropdown`).
    Dropdown
);
handle!(
    /// A box to tick (ipywidgets' `Checkbox`).
    Checkbox
);
handle!(
    /// A button whose clicks run callbacks (ipywidgets' `Button`).
    Button
);
handle!(
    /// A line of text to edit (ipywidgets' `Text`).
    Text
);
handle!(
    /// A line of text to show (ipywidgets' `Label`).
    Label
);
handle!(
    /// Where outputs go: what callbacks print and show (ipywidgets' `Output`).
    Output
);
handle!(
    /// Widgets side by side (ipywidgets' `HBox`).
    HBox
);
handle!(
    /// Widgets one above the other (ipywidgets' `VBox`).
    VBox
);

impl Dropdown {
    /// A choice among `options` (labels), the first chosen.
    pub fn new<S: Into<String>>(
        description: &str,
        options: impl IntoIterator<Item = S>,
    ) -> Result<Dropdown, WidgetError> {
        let labels: Vec<String> = options.into_iter().map(Into::into).collect();
        if labels.is_empty() {
            return Err(WidgetError::BadOption { description: description.into(), why: "no options".into() });
        }
        if let Some(twice) = labels.iter().enumerate().find(|(i, l)| labels[..*i].contains(l)).map(|(_, l)| l)
        {
            let why = format!("the label {twice:?} is given twice (a choice is told by its label)");
            return Err(WidgetError::BadOption { description: description.into(), why });
        }
        Ok(Dropdown(open_dom(
            CONTROLS,
            "2.0.0",
            "Dropdown",
            Some("DescriptionStyleModel"),
            json!({"description": description, "_options_labels": labels, "index": 0, "disabled": false,
                   "description_allow_html": false}),
        )))
    }

    /// The labels.
    pub fn options(&self) -> Vec<String> {
        self.0.get("_options_labels").and_then(|v| serde_json::from_value(v).ok()).unwrap_or_default()
    }

    /// The chosen label's index.
    pub fn index(&self) -> usize {
        self.0.get("index").map_or(0, |v| as_i64(&v).max(0) as usize)
    }

    /// The chosen label.
    pub fn value(&self) -> String {
        self.options().get(self.index()).cloned().unwrap_or_default()
    }

    /// Chooses `label`; an error names the options when it is not one of them.
    pub fn set_value(&self, label: &str) -> Result<(), WidgetError> {
        let options = self.options();
        let Some(i) = options.iter().position(|o| o == label) else {
            let description = self.0.get_str("description");
            return Err(WidgetError::BadOption {
                description,
                why: format!("{label:?} is not one of {options:?}"),
            });
        };
        self.0.set("index", json!(i));
        Ok(())
    }

    /// Runs `f` with the chosen label at each change; its output goes under the front end's message (JupyterLab's log console; see the `_into` form).
    pub fn on_change(&self, f: impl Fn(String) + Send + Sync + 'static) {
        let me = self.clone();
        self.0.observe("index", move |_| f(me.value()));
    }

    /// Runs `f` at each change, its output replacing `out`'s content.
    pub fn on_change_into(&self, out: &Output, f: impl Fn(String) + Send + Sync + 'static) {
        let me = self.clone();
        self.0.observe_into("index", out, move |_| f(me.value()));
    }

    fn text(&self) -> String {
        format!("Dropdown({:?} of {:?})", self.value(), self.options())
    }
}

impl Checkbox {
    /// A box, ticked when `value`.
    pub fn new(description: &str, value: bool) -> Checkbox {
        Checkbox(open_dom(
            CONTROLS,
            "2.0.0",
            "Checkbox",
            Some("CheckboxStyleModel"),
            json!({"description": description, "value": value, "indent": true, "disabled": false,
                   "description_allow_html": false}),
        ))
    }

    /// Whether it is ticked.
    pub fn value(&self) -> bool {
        self.0.get("value").and_then(|v| v.as_bool()).unwrap_or(false)
    }

    /// Ticks or unticks it; callbacks run.
    pub fn set_value(&self, value: bool) {
        self.0.set("value", json!(value));
    }

    /// Runs `f` with the new value at each change; its output goes under the front end's message (JupyterLab's log console; see the `_into` form).
    pub fn on_change(&self, f: impl Fn(bool) + Send + Sync + 'static) {
        self.0.observe("value", move |v| f(v.as_bool().unwrap_or(false)));
    }

    /// Runs `f` at each change, its output replacing `out`'s content.
    pub fn on_change_into(&self, out: &Output, f: impl Fn(bool) + Send + Sync + 'static) {
        self.0.observe_into("value", out, move |v| f(v.as_bool().unwrap_or(false)));
    }

    fn text(&self) -> String {
        format!("Checkbox({})", self.value())
    }
}

impl Button {
    /// A button labelled `description`.
    pub fn new(description: &str) -> Button {
        Button(open_dom(
            CONTROLS,
            "2.0.0",
            "Button",
            Some("ButtonStyleModel"),
            json!({"description": description, "button_style": "", "icon": "", "disabled": false}),
        ))
    }

    /// Runs `f` at each click; its output goes under the front end's message (JupyterLab's log console; see `on_click_into`).
    pub fn on_click(&self, f: impl Fn() + Send + Sync + 'static) {
        self.0.observe("click", move |_| f());
    }

    /// Runs `f` at each click, its output replacing `out`'s content.
    pub fn on_click_into(&self, out: &Output, f: impl Fn() + Send + Sync + 'static) {
        self.0.observe_into("click", out, move |_| f());
    }

    fn text(&self) -> String {
        let d = self.0.get_str("description");
        format!("Button({d:?})")
    }
}

impl Text {
    /// A text field holding `value`.
    pub fn new(description: &str, value: &str) -> Text {
        Text(open_dom(
            CONTROLS,
            "2.0.0",
            "Text",
            Some("TextStyleModel"),
            json!({"description": description, "value": value, "placeholder": "\u{200b}", "continuous_update": true,
                   "disabled": false, "description_allow_html": false}),
        ))
    }

    /// The text now.
    pub fn value(&self) -> String {
        self.0.get_str("value")
    }

    /// Replaces the text; callbacks run.
    pub fn set_value(&self, value: &str) {
        self.0.set("value", json!(value));
    }

    /// Runs `f` with the new text at each change; its output goes under the front end's message (JupyterLab's log console; see the `_into` form).
    pub fn on_change(&self, f: impl Fn(String) + Send + Sync + 'static) {
        self.0.observe("value", move |v| f(v.as_str().unwrap_or("").to_string()));
    }

    /// Runs `f` at each change, its output replacing `out`'s content.
    pub fn on_change_into(&self, out: &Output, f: impl Fn(String) + Send + Sync + 'static) {
        self.0.observe_into("value", out, move |v| f(v.as_str().unwrap_or("").to_string()));
    }

    fn text(&self) -> String {
        format!("Text({:?})", self.value())
    }
}

impl Label {
    /// A label showing `text`.
    pub fn new(text: &str) -> Label {
        Label(open_dom(
            CONTROLS,
            "2.0.0",
            "Label",
            Some("LabelStyleModel"),
            json!({"value": text, "description": "", "placeholder": "\u{200b}", "description_allow_html": false}),
        ))
    }

    /// Shows `text` instead.
    pub fn set_text(&self, text: &str) {
        self.0.set("value", json!(text));
    }

    fn text(&self) -> String {
        self.0.get_str("value")
    }
}

impl Default for Output {
    fn default() -> Output {
        Output::new()
    }
}

impl Output {
    /// An empty output area.
    pub fn new() -> Output {
        Output(open_dom(OUTPUT, "1.0.0", "Output", None, json!({"msg_id": "", "outputs": []})))
    }

    /// Its outputs, as nbformat writes them.
    pub fn outputs(&self) -> Vec<Value> {
        match self.0.get("outputs") {
            Some(Value::Array(a)) => a,
            _ => Vec::new(),
        }
    }

    /// Empties it (ipywidgets' `clear_output`).
    pub fn clear(&self) {
        self.0.set("outputs", json!([]));
    }

    /// Adds `value` as a cell ending with it shows (a chart's image, a tensor's table, …).
    pub fn show<T: std::fmt::Debug + ?Sized>(&self, value: &T) {
        self.append(vec![capture::display_output(&crate::rich::bundle_of(value))]);
    }

    /// Adds `text` as printed text.
    pub fn print(&self, text: &str) {
        self.append(vec![capture::stream_output("stdout", text)]);
    }

    /// Runs `f`, adding what it prints and shows (ipywidgets' `with out:`); a panic in it shows
    /// as an error here and gives `None`.
    pub fn capture<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        let (r, outputs) = capture::run(f);
        self.append(outputs);
        r
    }

    fn append(&self, more: Vec<Value>) {
        let mut all = self.outputs();
        all.extend(more);
        self.0.set("outputs", Value::Array(all));
    }

    fn text(&self) -> String {
        let mut text = String::new();
        for o in self.outputs() {
            match o["output_type"].as_str() {
                Some("stream") => text.push_str(o["text"].as_str().unwrap_or("")),
                Some("error") => text.push_str(&format!(
                    "{}: {}\n",
                    o["ename"].as_str().unwrap_or(""),
                    o["evalue"].as_str().unwrap_or("")
                )),
                _ => {
                    if let Some(t) = o["data"]["text/plain"].as_str() {
                        text.push_str(t);
                        text.push('\n');
                    }
                }
            }
        }
        text.trim_end().to_string()
    }
}

fn open_box(name: &str, children: Vec<&Widget>) -> Widget {
    let refs: Vec<String> = children.iter().map(|w| w.reference()).collect();
    open_dom(CONTROLS, "2.0.0", name, None, json!({"children": refs, "box_style": ""}))
}

/// The text of a box's children, as the terminal shows it.
fn children_text(w: &Widget, sep: &str) -> String {
    let ids: Vec<String> = w.get("children").and_then(|v| serde_json::from_value(v).ok()).unwrap_or_default();
    ids.iter()
        .map(|r| text_of_model(Widget::from_id(r.trim_start_matches("IPY_MODEL_"))))
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join(sep)
}

impl HBox {
    /// `children` side by side.
    pub fn new<'a>(children: impl IntoIterator<Item = &'a Widget>) -> HBox {
        HBox(open_box("HBox", children.into_iter().collect()))
    }

    fn text(&self) -> String {
        children_text(&self.0, "  ")
    }
}

impl VBox {
    /// `children` one above the other.
    pub fn new<'a>(children: impl IntoIterator<Item = &'a Widget>) -> VBox {
        VBox(open_box("VBox", children.into_iter().collect()))
    }

    fn text(&self) -> String {
        children_text(&self.0, "\n")
    }
}

/// The text of the typed handle of model `w` (by its model name).
pub(crate) fn text_of_model(w: Widget) -> String {
    let name = w.get_str("_model_name");
    match name.as_str() {
        "IntSliderModel" => IntSlider(w).text(),
        "FloatSliderModel" => FloatSlider(w).text(),
        "FloatLogSliderModel" => FloatLogSlider(w).text(),
        "DropdownModel" => Dropdown(w).text(),
        "CheckboxModel" => Checkbox(w).text(),
        "ButtonModel" => Button(w).text(),
        "TextModel" => Text(w).text(),
        "LabelModel" => Label(w).text(),
        "OutputModel" => Output(w).text(),
        "HBoxModel" => HBox(w).text(),
        "VBoxModel" => VBox(w).text(),
        _ => String::new(),
    }
}
