//! Widget models as ipywidgets keeps them: each model is a comm of target `jupyter.widget`
//! whose state (a JSON object) the front end and the session share. [`Widget`] is the handle a
//! cell holds; the state and the callbacks live in the session's one registry (shared by every
//! cell's copy of this crate), so a callback made in one cell runs when a later cell's slider
//! moves. [`answer`] handles a front end's comm message: a state update runs the callbacks of
//! what changed, each with its output captured (into its Output widget, or for the front end to
//! show under the message).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use eager::shared::Shared;
use serde_json::{json, Map, Value};

use super::capture;
use super::comm::{self, CommKind, CommLine};

/// The widget protocol version this crate speaks (ipywidgets 8).
pub const PROTOCOL_VERSION: &str = "2.1.0";
/// The comm target of widget models.
pub const WIDGET_TARGET: &str = "jupyter.widget";
/// The comm target a front end opens to ask for every model's state at once.
pub const CONTROL_TARGET: &str = "jupyter.widget.control";
/// The MIME type of a widget's view in a cell's output.
pub const WIDGET_VIEW_MIME: &str = "application/vnd.jupyter.widget-view+json";

/// A callback's code.
pub(crate) type Callback = Arc<dyn Fn(&Value) + Send + Sync>;

/// A callback: the state key (or custom event) it follows, and where its output goes.
#[derive(Clone)]
struct Observer {
    key: String,
    run: Callback,
    /// The Output widget its output replaces the content of; `None`: its output goes under the
    /// front end's message (or into the running cell).
    output: Option<String>,
}

struct Model {
    state: Map<String, Value>,
    observers: Vec<Observer>,
}

#[derive(Default)]
struct Registry {
    models: HashMap<String, Model>,
    /// Open comms of the control target.
    control_comms: Vec<String>,
}

static REGISTRY: Shared<Mutex<Registry>> =
    Shared::new("eager_cell::widgets::registry", || Mutex::new(Registry::default()));

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.get().lock().unwrap_or_else(|p| p.into_inner())
}

/// A widget model of this session: a handle (cloning it gives another handle to the same model).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Widget {
    id: String,
}

impl std::fmt::Debug for Widget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self.get_str("_model_name");
        write!(f, "{}({})", name.trim_end_matches("Model"), self.id)
    }
}

impl Widget {
    /// Opens a model with `state` (which names its model and view), sending `comm_open`.
    pub fn open(state: Map<String, Value>) -> Widget {
        let id = comm::new_id();
        registry().models.insert(id.clone(), Model { state: state.clone(), observers: Vec::new() });
        comm::emit(CommLine {
            kind: CommKind::Open,
            comm_id: id.clone(),
            target_name: Some(WIDGET_TARGET.into()),
            data: json!({"state": state, "buffer_paths": []}),
            metadata: json!({"version": PROTOCOL_VERSION}),
        });
        Widget { id }
    }

    /// A handle of the model whose id is `id` (which may be closed, or never was).
    pub(crate) fn from_id(id: &str) -> Widget {
        Widget { id: id.to_string() }
    }

    /// The model's id (its comm's id).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// How other models' state refers to this one (`IPY_MODEL_<id>`).
    pub fn reference(&self) -> String {
        format!("IPY_MODEL_{}", self.id)
    }

    /// The state's value of `key`; `None` when the model has none (or was closed).
    pub fn get(&self, key: &str) -> Option<Value> {
        registry().models.get(&self.id).and_then(|m| m.state.get(key).cloned())
    }

    /// The state's string under `key` ("" when it has none).
    pub(crate) fn get_str(&self, key: &str) -> String {
        self.get(key).and_then(|v| v.as_str().map(String::from)).unwrap_or_default()
    }

    /// Whether the model is open (not closed by the session or the front end).
    pub fn is_open(&self) -> bool {
        registry().models.contains_key(&self.id)
    }

    /// Sets `key` to `value`, sends the update to the front end and runs the callbacks that
    /// follow `key` (as ipywidgets' observers run when Python sets a trait). A value equal to
    /// the current one does nothing.
    pub fn set(&self, key: &str, value: Value) {
        let mut state = Map::new();
        state.insert(key.to_string(), value);
        let changed = apply(&self.id, state.clone());
        if changed.is_empty() {
            return;
        }
        comm::emit(update_line(&self.id, state));
        notify(&self.id, &changed);
    }

    /// Runs `f` with the new value each time `key` changes (from the front end or the session).
    /// Its output goes where the change came from: under the front end's message, or into the
    /// running cell.
    pub fn observe(&self, key: &str, f: impl Fn(&Value) + Send + Sync + 'static) {
        self.add_observer(key, Arc::new(f), None);
    }

    /// [`Widget::observe`], with each run's output (what it prints and shows, its error or
    /// panic) replacing the content of `output`, an Output widget.
    pub fn observe_into(&self, key: &str, output: &Widget, f: impl Fn(&Value) + Send + Sync + 'static) {
        self.add_observer(key, Arc::new(f), Some(output.id.clone()));
    }

    pub(crate) fn add_observer(&self, key: &str, run: Callback, output: Option<String>) {
        if let Some(m) = registry().models.get_mut(&self.id) {
            m.observers.push(Observer { key: key.to_string(), run, output });
        }
    }

    /// Closes the model: its views go away, its callbacks are dropped (`comm_close`).
    pub fn close(&self) {
        if registry().models.remove(&self.id).is_some() {
            comm::emit(CommLine::close(&self.id));
        }
    }

    /// The view a cell's output shows: the widget-view JSON, and `text` for front ends without
    /// widgets (a terminal, a static render).
    pub fn view_bundle(&self, text: String) -> Vec<(String, String)> {
        let view = json!({"version_major": 2, "version_minor": 0, "model_id": self.id});
        vec![("text/plain".into(), text), (WIDGET_VIEW_MIME.into(), view.to_string())]
    }
}

fn update_line(id: &str, state: Map<String, Value>) -> CommLine {
    CommLine::msg(id, json!({"method": "update", "state": state, "buffer_paths": []}))
}

/// Writes `state` into the model; returns the keys whose value changed, with their values.
fn apply(id: &str, state: Map<String, Value>) -> Vec<(String, Value)> {
    let mut reg = registry();
    let Some(m) = reg.models.get_mut(id) else { return Vec::new() };
    let mut changed = Vec::new();
    for (k, v) in state {
        if m.state.get(&k) != Some(&v) {
            m.state.insert(k.clone(), v.clone());
            changed.push((k, v));
        }
    }
    changed
}

/// Runs the callbacks of model `id` that follow a changed key (outside the registry's lock: a
/// callback reads and sets widgets).
fn notify(id: &str, changed: &[(String, Value)]) {
    let observers: Vec<Observer> = registry().models.get(id).map(|m| m.observers.clone()).unwrap_or_default();
    for (key, value) in changed {
        for o in observers.iter().filter(|o| o.key == *key) {
            call(o, value);
        }
    }
}

/// Runs one callback: into its Output widget (replacing what it showed), or under the front
/// end's message, or (set from a running cell, no Output) straight into the cell's output.
fn call(o: &Observer, value: &Value) {
    match &o.output {
        Some(out) => run_into(&Widget::from_id(out), || (o.run)(value)),
        None if comm::answering() => {
            let (_, outputs) = capture::run(|| (o.run)(value));
            comm::push_outputs(outputs);
        }
        None => (o.run)(value),
    }
}

/// Runs `f` with its output (what it prints and shows, its error or panic) replacing the
/// content of the Output widget `out`.
pub(crate) fn run_into(out: &Widget, f: impl FnOnce()) {
    let (_, outputs) = capture::run(f);
    out.set("outputs", Value::Array(outputs));
}

/// Answers a front end's comm message (`kind`, the comm's id, its target on an open, its data):
/// the comm lines and outputs to send back as its children, and whether the comm was known.
pub fn answer(kind: CommKind, comm_id: &str, target_name: Option<&str>, data: &Value) -> Value {
    let mut known = true;
    let outbox = comm::answer(|| known = handle(kind, comm_id, target_name, data));
    json!({"known": known, "lines": outbox.lines, "outputs": outbox.outputs})
}

fn handle(kind: CommKind, comm_id: &str, target_name: Option<&str>, data: &Value) -> bool {
    let is_control = registry().control_comms.iter().any(|c| c == comm_id);
    match kind {
        CommKind::Open if target_name == Some(CONTROL_TARGET) => {
            registry().control_comms.push(comm_id.to_string());
            true
        }
        // A target this session does not serve: closed at once, as the messaging spec asks.
        CommKind::Open => {
            comm::emit(CommLine::close(comm_id));
            false
        }
        CommKind::Close => {
            let mut reg = registry();
            reg.control_comms.retain(|c| c != comm_id);
            is_control || reg.models.remove(comm_id).is_some()
        }
        CommKind::Msg if is_control => {
            if data["method"] == "request_states" {
                let states = json!({"method": "update_states", "states": all_states(), "buffer_paths": []});
                comm::emit(CommLine::msg(comm_id, states));
            }
            true
        }
        CommKind::Msg => {
            let Some(state) = registry().models.get(comm_id).map(|m| m.state.clone()) else { return false };
            match data["method"].as_str() {
                Some("update") => {
                    let update = data["state"].as_object().cloned().unwrap_or_default();
                    let changed = apply(comm_id, update);
                    notify(comm_id, &changed);
                }
                Some("request_state") => comm::emit(update_line(comm_id, state)),
                // A button's click: `{"method": "custom", "content": {"event": "click"}}`.
                Some("custom") => {
                    if let Some(event) = data["content"]["event"].as_str() {
                        notify(comm_id, &[(event.to_string(), data["content"].clone())]);
                    }
                }
                _ => {}
            }
            true
        }
    }
}

/// Every model's state as the control comm's `update_states` sends it.
fn all_states() -> Value {
    let reg = registry();
    let states: Map<String, Value> = reg
        .models
        .iter()
        .map(|(id, m)| {
            let s = &m.state;
            (
                id.clone(),
                json!({
                    "model_name": s.get("_model_name"),
                    "model_module": s.get("_model_module"),
                    "model_module_version": s.get("_model_module_version"),
                    "state": s,
                }),
            )
        })
        .collect();
    Value::Object(states)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, Ordering};

    fn slider() -> Widget {
        let state = json!({"_model_name": "IntSliderModel", "value": 1});
        let mut w = None;
        comm::answer(|| w = Some(Widget::open(state.as_object().unwrap().clone())));
        w.unwrap()
    }

    #[test]
    fn a_front_end_update_sets_the_state_and_runs_the_callbacks_of_what_changed() {
        let w = slider();
        let seen = Arc::new(AtomicI64::new(0));
        let s = seen.clone();
        w.observe("value", move |v| s.store(v.as_i64().unwrap(), Ordering::SeqCst));
        let reply = answer(CommKind::Msg, w.id(), None, &json!({"method": "update", "state": {"value": 5}}));
        assert_eq!(reply["known"], true);
        assert_eq!(seen.load(Ordering::SeqCst), 5);
        assert_eq!(w.get("value"), Some(json!(5)));
        // The same value again changes nothing and runs nothing.
        seen.store(0, Ordering::SeqCst);
        answer(CommKind::Msg, w.id(), None, &json!({"method": "update", "state": {"value": 5}}));
        assert_eq!(seen.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn unknown_comms_are_reported_and_unknown_targets_closed() {
        let reply = answer(CommKind::Msg, "nope", None, &json!({"method": "update", "state": {}}));
        assert_eq!(reply["known"], false);
        let reply = answer(CommKind::Open, "c1", Some("some.target"), &json!({}));
        assert_eq!(reply["lines"][0]["kind"], "close");
        assert_eq!(reply["lines"][0]["comm_id"], "c1");
    }

    #[test]
    fn request_state_and_the_control_comm_answer_with_the_state() {
        let w = slider();
        let reply = answer(CommKind::Msg, w.id(), None, &json!({"method": "request_state"}));
        assert_eq!(reply["lines"][0]["data"]["state"]["value"], 1);
        answer(CommKind::Open, "ctl", Some(CONTROL_TARGET), &json!({}));
        let reply = answer(CommKind::Msg, "ctl", None, &json!({"method": "request_states"}));
        let states = &reply["lines"][0]["data"]["states"];
        assert_eq!(states[w.id()]["model_name"], "IntSliderModel");
        assert_eq!(states[w.id()]["state"]["value"], 1);
    }
}
