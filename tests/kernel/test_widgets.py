"""Widgets over Jupyter comms with a real jupyter_client: a cell's widgets open as the models
ipywidgets 8 opens (its own `get_state` is the reference), comm_info lists them, a front end's
update runs the Rust callback in the session and its output reaches the Output widget, a
panicking callback shows its error there and the kernel keeps its variables, closes are
honoured, unknown comms are ignored with a log line, queued updates of one slider are merged,
and `interact!` re-runs its closure."""
import os
import time

import ipywidgets
import pytest
from jupyter_client.manager import start_new_kernel

STARTUP = 900  # the first kernel of a fresh machine builds eager into its evcxr session
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    log = tmp_path_factory.mktemp("log") / "kernel.stderr"
    with open(log, "w") as stderr:
        km, kc = start_new_kernel(kernel_name="eager", startup_timeout=STARTUP, stderr=stderr)
    yield km, kc, log
    kc.stop_channels()
    if km.is_alive():
        km.shutdown_kernel(now=True)


def run(kc, code, timeout=300):
    outputs = []
    reply = kc.execute_interactive(code, timeout=timeout, output_hook=outputs.append)
    assert reply["content"]["status"] == "ok", reply["content"]
    return outputs


def value(kc, code):
    """The text of the value a cell ends with."""
    [text] = [m["content"]["data"]["text/plain"] for m in run(kc, code) if m["msg_type"] == "execute_result"]
    return text


def until_idle(kc, msg_id, timeout=120):
    """The iopub messages that are children of `msg_id`, up to its idle status."""
    got, deadline = [], time.time() + timeout
    while time.time() < deadline:
        m = kc.get_iopub_msg(timeout=deadline - time.time())
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        if m["msg_type"] == "status":
            if m["content"]["execution_state"] == "idle":
                return got
            continue
        got.append(m)
    raise AssertionError(f"no idle for {msg_id}; got {got}")


def send(kc, msg_type, content):
    msg = kc.session.msg(msg_type, content)
    kc.shell_channel.send(msg)
    return msg["header"]["msg_id"]


def comm(kc, msg_type, content):
    return until_idle(kc, send(kc, msg_type, content))


def update(comm_id, **state):
    return {"comm_id": comm_id, "data": {"method": "update", "state": state, "buffer_paths": []}}


def opens(outputs):
    """The comms opened, each with its state as the front end holds it after the updates that
    followed the open."""
    opened = {}
    for m in outputs:
        c = m["content"]
        if m["msg_type"] == "comm_open":
            opened[c["comm_id"]] = m
        elif m["msg_type"] == "comm_msg" and c["comm_id"] in opened and c["data"].get("method") == "update":
            opened[c["comm_id"]]["content"]["data"]["state"].update(c["data"]["state"])
    return opened


def comm_info(kc, target=None):
    msg_id = kc.comm_info(target_name=target)
    while True:
        m = kc.get_shell_msg(timeout=30)
        if m["parent_header"].get("msg_id") == msg_id:
            return m["content"]["comms"]


def by_model(outputs, name):
    return [m for m in opens(outputs).values() if m["content"]["data"]["state"]["_model_name"] == name]


def view_of(outputs):
    views = [m["content"]["data"][WIDGET_VIEW] for m in outputs
             if m["msg_type"] in ("execute_result", "display_data") and WIDGET_VIEW in m["content"]["data"]]
    assert len(views) == 1, outputs
    assert views[0]["version_major"] == 2
    return views[0]["model_id"]


def output_updates(msgs, output_id):
    return [m["content"]["data"]["state"]["outputs"] for m in msgs
            if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == output_id
            and "outputs" in m["content"]["data"].get("state", {})]


def test_a_slider_opens_as_ipywidgets_opens_it_and_its_callback_fills_the_output(kernel):
    km, kc, _ = kernel
    run(kc, "let per_example = Tensor::from_slice(&[0.5f32], &[1])?;")
    # The callback uses a tensor of an earlier cell (a clone moved into it; the session keeps its own).
    outputs = run(kc, """
use eager_cell::widgets::*;
let batch = IntSlider::new("batch", 8..=256)?.with_value(64);
let out = Output::new();
let cost = per_example.clone();
batch.on_change_into(&out, move |b| {
    println!("batch {b}: {}", cost.mul_scalar(b as f64).unwrap().to_vec::<f32>().unwrap()[0]);
    eager_cell::show("text/plain", &format!("steps {}", 1024 / b));
});
VBox::new([batch.widget(), out.widget()])
""")
    for m in opens(outputs).values():
        assert m["content"]["target_name"] == "jupyter.widget"
        assert m["metadata"]["version"] == "2.1.0"
    [slider] = by_model(outputs, "IntSliderModel")
    state = slider["content"]["data"]["state"]
    # ipywidgets' own state of the same control: every key there, the same model and view.
    reference = ipywidgets.IntSlider(value=64, min=8, max=256, description="batch").get_state()
    assert set(reference) <= set(state), set(reference) - set(state)
    for k in ("_model_module", "_model_module_version", "_model_name", "_view_module",
              "_view_module_version", "_view_name", "value", "min", "max", "step", "description",
              "readout_format", "orientation", "behavior"):
        assert state[k] == reference[k], k
    layout_id = state["layout"].removeprefix("IPY_MODEL_")
    assert opens(outputs)[layout_id]["content"]["data"]["state"]["_model_name"] == "LayoutModel"
    [out] = by_model(outputs, "OutputModel")
    assert out["content"]["data"]["state"]["_model_module"] == ipywidgets.Output().get_state()["_model_module"]
    box = view_of(outputs)
    children = opens(outputs)[box]["content"]["data"]["state"]["children"]
    assert children == [f"IPY_MODEL_{slider['content']['comm_id']}", f"IPY_MODEL_{out['content']['comm_id']}"]

    # comm_info lists what is open, by target.
    info = comm_info(kc, "jupyter.widget")
    assert set(opens(outputs)) <= set(info)
    assert all(c["target_name"] == "jupyter.widget" for c in info.values())

    # The front end moves the slider: the Rust callback runs, its output fills the Output.
    msgs = comm(kc, "comm_msg", update(slider["content"]["comm_id"], value=128))
    assert output_updates(msgs, out["content"]["comm_id"]) == [[
        {"output_type": "stream", "name": "stdout", "text": "batch 128: 64\n"},
        {"output_type": "display_data", "data": {"text/plain": "steps 8"}, "metadata": {}},
    ]]
    # The session sees the value; a value set by the session goes to the front end.
    assert value(kc, "batch.value()") == "128"
    assert value(kc, "per_example.to_vec::<f32>()?") == "[0.5]"
    outputs = run(kc, "batch.set_value(999); batch.value()")
    sent = [m for m in outputs if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == slider["content"]["comm_id"]]
    assert sent and sent[0]["content"]["data"]["state"] == {"value": 256}, "clamped, as ipywidgets clamps"


def test_a_panicking_callback_shows_its_error_and_the_kernel_keeps_its_variables(kernel):
    km, kc, _ = kernel
    outputs = run(kc, """
use eager_cell::widgets::*;
let kept = 41;
let boom = Button::new("boom");
let out = Output::new();
boom.on_click_into(&out, || { println!("before"); panic!("no {}", 1 + 1) });
HBox::new([boom.widget(), out.widget()])
""")
    [button] = by_model(outputs, "ButtonModel")
    [out] = by_model(outputs, "OutputModel")
    msgs = comm(kc, "comm_msg", {"comm_id": button["content"]["comm_id"],
                                 "data": {"method": "custom", "content": {"event": "click"}}})
    [shown] = output_updates(msgs, out["content"]["comm_id"])
    assert shown[0] == {"output_type": "stream", "name": "stdout", "text": "before\n"}
    assert shown[-1]["output_type"] == "error" and "no 2" in shown[-1]["evalue"], shown
    assert km.is_alive()
    assert value(kc, "kept + 1") == "42"


def test_an_interrupt_stops_a_running_callback_and_the_next_one_runs(kernel):
    km, kc, _ = kernel
    outputs = run(kc, """
use eager_cell::widgets::*;
let spin = Button::new("spin");
let n = IntSlider::new("n", 1..=4)?;
let shown = Output::new();
spin.on_click_into(&shown, || {
    let r = (|| -> eager::Result<()> { loop { Tensor::ones(&[8], DType::F32)?.sum_all()?; } })();
    println!("stopped: {}", r.unwrap_err());
});
n.on_change_into(&shown, |n| {
    println!("sum {}", Tensor::ones(&[n as usize], DType::F32).unwrap().sum_all().unwrap().item::<f32>().unwrap())
});
HBox::new([spin.widget(), n.widget(), shown.widget()])
""")
    [button] = by_model(outputs, "ButtonModel")
    [slider] = by_model(outputs, "IntSliderModel")
    [out] = by_model(outputs, "OutputModel")
    click = send(kc, "comm_msg", {"comm_id": button["content"]["comm_id"],
                                  "data": {"method": "custom", "content": {"event": "click"}}})
    time.sleep(2)
    km.interrupt_kernel()
    [stopped] = output_updates(until_idle(kc, click), out["content"]["comm_id"])
    assert stopped[0]["text"].startswith("stopped: ") and "nterrupt" in stopped[0]["text"], stopped
    # No interrupt is left pending: the next callback's ops run.
    [summed] = output_updates(comm(kc, "comm_msg", update(slider["content"]["comm_id"], value=3)), out["content"]["comm_id"])
    assert summed == [{"output_type": "stream", "name": "stdout", "text": "sum 3\n"}], summed


def test_a_thread_of_the_session_moves_a_widget_after_its_cell_ended(kernel):
    km, kc, _ = kernel
    outputs = run(kc, """
let late = eager_cell::widgets::Label::new("early");
let moved = late.clone();
std::thread::spawn(move || { std::thread::sleep(std::time::Duration::from_millis(300)); moved.set_text("late"); });
late
""")
    [label] = by_model(outputs, "LabelModel")
    time.sleep(1.5)
    # evcxr reads the cell process's output while a cell runs: the update goes out with the next.
    outputs = run(kc, "late.get(\"value\").unwrap()")
    sent = [m["content"]["data"]["state"] for m in outputs
            if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == label["content"]["comm_id"]]
    assert sent == [{"value": "late"}], outputs
    assert [m["content"]["data"]["text/plain"] for m in outputs if m["msg_type"] == "execute_result"] == ['String("late")']


def test_closes_and_unknown_comms(kernel):
    km, kc, log = kernel
    outputs = run(kc, 'let gone = eager_cell::widgets::Label::new("bye"); gone')
    [label] = by_model(outputs, "LabelModel")
    lid = label["content"]["comm_id"]
    assert comm(kc, "comm_close", {"comm_id": lid, "data": {}}) == []
    assert lid not in comm_info(kc)
    assert value(kc, "gone.is_open()") == "false"
    # A message for a comm that does not exist: nothing happens but a log line.
    assert comm(kc, "comm_msg", update("no-such-comm", value=1)) == []
    assert comm(kc, "comm_msg", update(lid, value="x")) == []
    time.sleep(0.5)
    text = log.read_text()
    assert "comm_msg for comm no-such-comm, which is not open: ignored" in text, text[-2000:]
    # A target the session does not serve is closed at once; the control target answers with
    # every model's state.
    msgs = comm(kc, "comm_open", {"comm_id": "t1", "target_name": "no.such.target", "data": {}})
    assert [(m["msg_type"], m["content"]["comm_id"]) for m in msgs] == [("comm_close", "t1")]
    comm(kc, "comm_open", {"comm_id": "ctl", "target_name": "jupyter.widget.control", "data": {}})
    msgs = comm(kc, "comm_msg", {"comm_id": "ctl", "data": {"method": "request_states"}})
    [states] = [m["content"]["data"] for m in msgs if m["msg_type"] == "comm_msg"]
    assert states["method"] == "update_states"
    assert lid not in states["states"]
    assert any(s["model_name"] == "IntSliderModel" for s in states["states"].values())
    assert km.is_alive()


def test_interact_reruns_the_closure_and_merges_queued_updates(kernel):
    km, kc, _ = kernel
    outputs = run(kc, """
let demo = eager_cell::interact!(|batch: usize = (8..=256, 8), scale: f32 = 1.5| {
    format!("{}", batch as f32 * scale)
})?;
demo
""")
    [slider] = by_model(outputs, "IntSliderModel")
    [out] = by_model(outputs, "OutputModel")
    assert slider["content"]["data"]["state"]["value"] == 128
    first = out["content"]["data"]["state"]["outputs"]
    assert [o["data"]["text/plain"] for o in first if o["output_type"] == "display_data"] == ['"192"']
    assert view_of(outputs) in opens(outputs)
    sid, oid = slider["content"]["comm_id"], out["content"]["comm_id"]
    msgs = comm(kc, "comm_msg", update(sid, value=64))
    assert [[o["data"]["text/plain"] for o in outs] for outs in output_updates(msgs, oid)] == [['"96"']]
    # Two changes queued behind a busy session run the closure once, with the later value; each
    # change still gets its idle.
    busy = send(kc, "execute_request", {"code": "std::thread::sleep(std::time::Duration::from_millis(1500));",
                                        "silent": False, "store_history": True, "user_expressions": {},
                                        "allow_stdin": False})
    time.sleep(0.3)
    a = send(kc, "comm_msg", update(sid, value=16))
    b = send(kc, "comm_msg", update(sid, value=24))
    until_idle(kc, busy, timeout=300)
    got_a = until_idle(kc, a)
    got_b = until_idle(kc, b)
    shown = [[o["data"]["text/plain"] for o in outs] for outs in output_updates(got_a + got_b, oid)]
    assert shown == [['"36"']], shown
    assert value(kc, "demo.output().outputs().len()") == "1"
