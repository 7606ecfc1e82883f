"""The eager kernel under a real jupyter_client: signatures, interrupt, restart, shutdown, live
displays (display_data then update_display_data with one display_id), the compile heartbeat,
:memory and an out-of-memory error."""
import os
import pathlib
import random
import re
import signal
import tempfile
import time

import pytest
import zmq
from jupyter_client.manager import start_new_kernel
from jupyter_client.session import Session

STARTUP = 900  # the first kernel of a fresh machine builds eager into its evcxr session


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    # A persistent compile cache of its own: the heartbeat test needs a compile, not a load of
    # what an earlier run compiled.
    # A heartbeat for every compile running at a 100 ms tick (EAGER_HEARTBEAT_MS=0), not only
    # those past a second: the heartbeat test then needs a compile in progress, not a length.
    env = {**os.environ, "EAGER_COMPILE_CACHE_DIR": str(tmp_path_factory.mktemp("compiled")),
           "EAGER_HEARTBEAT_MS": "0"}
    km, kc = start_new_kernel(kernel_name="eager", startup_timeout=STARTUP, env=env)
    yield km, kc
    kc.stop_channels()
    if km.is_alive():
        km.shutdown_kernel(now=True)


def run(kc, code, timeout=300):
    """Executes `code`; returns (reply content, iopub messages of the request)."""
    outputs = []
    reply = kc.execute_interactive(code, timeout=timeout, output_hook=outputs.append)
    return reply["content"], outputs


def results(outputs):
    return [m["content"]["data"]["text/plain"] for m in outputs if m["msg_type"] == "execute_result"]


def test_a_badly_signed_message_is_dropped_and_never_run(kernel, tmp_path):
    km, kc = kernel
    marker = tmp_path / "ran"
    info = km.get_connection_info()
    forged = Session(key=b"not-the-kernel-key", signature_scheme="hmac-sha256")
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.connect(f"tcp://{info['ip']}:{info['shell_port']}")
    code = f'std::fs::write("{marker}", "ran")?;'
    forged.send(sock, forged.msg("execute_request", {"code": code, "silent": False, "store_history": True,
                                                     "user_expressions": {}, "allow_stdin": False}))
    unsigned = Session(key=b"", signature_scheme="hmac-sha256")
    unsigned.send(sock, unsigned.msg("execute_request", {"code": code, "silent": False, "store_history": True,
                                                         "user_expressions": {}, "allow_stdin": False}))
    assert sock.poll(8000) == 0, "the kernel answered a message with a bad signature"
    sock.close(linger=0)
    assert not marker.exists(), "a badly signed cell ran"
    # The kernel is still serving properly signed requests: the same cell, signed, writes the
    # marker (so its absence above means the cell did not run, not that it could not write).
    content, outputs = run(kc, "40 + 2")
    assert content["status"] == "ok" and results(outputs) == ["42"]
    content, _ = run(kc, code)
    assert content["status"] == "ok", content
    assert marker.read_text() == "ran", "the properly signed cell wrote its marker"


def live(outputs):
    """(msg_type, display_id, text/plain) of each display message of a request."""
    return [(m["msg_type"], m["content"].get("transient", {}).get("display_id"),
             m["content"]["data"].get("text/plain"))
            for m in outputs if m["msg_type"] in ("display_data", "update_display_data")]


def heartbeat(m):
    """Whether a display message is a compile's heartbeat (shown for any compile here)."""
    return m[2] is not None and " compiling " in m[2]


def test_a_progress_bar_and_a_chart_update_in_place_while_the_cell_runs(kernel, tmp_path):
    _, kc = kernel
    # Half way, the loop waits (at most 120 s) until the test has seen an update arrive: the
    # updates come while the cell runs, not all at its end, whatever the speed.
    release = tmp_path / "release"
    code = """
let t0 = std::time::Instant::now();
let mut bar = eager_cell::Progress::new("steps", 40);
let mut chart = eager_cell::LiveChart::new("Loss", "step", "loss").every(10);
for step in 0..40usize {
    std::thread::sleep(std::time::Duration::from_millis(30));
    chart.push(1.0 / (1.0 + step as f64));
    bar.set_note(&format!("step {step}"));
    bar.inc();
    if step == 20 {
        let release = std::path::Path::new("RELEASE");
        for _ in 0..12000 { if release.exists() { break; } std::thread::sleep(std::time::Duration::from_millis(10)); }
        println!("released: {}", release.exists());
    }
}
bar.finish();
chart.finish();
println!("loop took {} ms", t0.elapsed().as_millis());
""".replace("RELEASE", str(release))
    outputs = []

    def hook(m):
        outputs.append(m)
        if m["msg_type"] == "update_display_data" and not release.exists():
            release.write_text("seen")

    kc.execute_interactive(code, timeout=300, output_hook=hook)
    msgs = [m for m in live(outputs) if not heartbeat(m)]
    shown = [m for m in msgs if m[0] == "display_data"]
    assert len(shown) == 2, msgs
    bar_id, chart_id = shown[0][1], shown[1][1]
    assert bar_id and chart_id and bar_id != chart_id
    bar_updates = [m for m in msgs if m[0] == "update_display_data" and m[1] == bar_id]
    chart_updates = [m for m in msgs if m[0] == "update_display_data" and m[1] == chart_id]
    stream = "".join(m["content"]["text"] for m in outputs if m["msg_type"] == "stream")
    # An update reached the test while the loop waited in the middle.
    assert "released: true" in stream, stream
    # Redrawn at most every 100 ms of the loop as the cell timed it (plus the last state and
    # the drop), and at least a few times over its 1.2 s of sleeps; the last draw is full.
    took = re.search(r"loop took (\d+) ms", stream)
    assert took, stream
    assert 3 <= len(bar_updates) <= int(took[1]) // 100 + 2, (took[0], bar_updates)
    assert bar_updates[-1][2].startswith("steps 100%|") and "| 40/40 [" in bar_updates[-1][2], bar_updates[-1]
    # The chart redraws every 10 points: shown at the 10th, updated at the 20th, 30th and 40th
    # (finish has nothing left to draw); SVG each time.
    assert len(chart_updates) == 3, chart_updates
    assert chart_updates[-1][2].startswith("Loss: loss 0.0250 at step 39")
    svgs = [m["content"]["data"].get("image/svg+xml", "") for m in outputs
            if m["msg_type"] in ("display_data", "update_display_data")
            and m["content"].get("transient", {}).get("display_id") == chart_id]
    assert all(s.startswith("<svg") for s in svgs) and len(svgs) == 4
    # A loop left early by `?` leaves its bar where it stopped (drawn as the bar drops).
    code = """let mut bar = eager_cell::Progress::new("early", 100);
for step in 0..100usize {
    bar.inc();
    if step == 6 { Tensor::zeros(&[2], DType::F32)?.reshape(&[3])?; }
}"""
    content, outputs = run(kc, code)
    assert content["status"] == "error" and content["ename"] == "ShapeError", content
    early = [m for m in live(outputs) if m[2] and m[2].startswith("early")]
    assert early[-1][0] == "update_display_data" and "| 7/100 [" in early[-1][2], early


def test_a_long_compile_shows_a_heartbeat_that_is_emptied_when_it_ends(kernel):
    _, kc = kernel
    # A program of 1400-1600 ops: slow by size (seconds to compile), it spans heartbeat ticks.
    ops = 1400 + random.randrange(200)
    code = """
let m = Tensor::full(&[32, 32], 0.01, DType::F32)?;
let y = eager::fused(|| -> Result<Tensor> {
    let mut y = m.clone();
    for i in 0..OPSusize { y = y.matmul(&m)?.tanh()?.add_scalar(i as f64)?; }
    Ok(y)
})?;
y.sum_all()?.item::<f32>()? > 0.0
""".replace("OPS", str(ops))
    content, outputs = run(kc, code)
    assert content["status"] == "ok", content
    msgs = live(outputs)
    beats = [m for m in msgs if m[2] and "compiling fused(" in m[2]]
    assert beats and beats[0][0] == "display_data", msgs
    beat_id = beats[0][1]
    # The op and the time so far: "⠋ compiling fused(…) … 0.3 s".
    assert re.fullmatch(r". compiling fused\(f32\[32, 32\].* … \d+\.\d s", beats[-1][2]), beats[-1]
    # Emptied when the compile ended.
    last = [m for m in outputs if m["msg_type"] == "update_display_data"
            and m["content"]["transient"]["display_id"] == beat_id][-1]
    assert last["content"]["data"] == {}, last
    assert results(outputs) == ["true"]


def test_memory_shows_live_tensors_and_an_out_of_memory_error_names_the_largest(kernel):
    _, kc = kernel
    content, _ = run(kc, "let big = Tensor::zeros(&[1024, 1024], DType::F32)?.exp()?;")
    assert content["status"] == "ok"
    content, outputs = run(kc, ":memory")
    assert content["status"] == "ok"
    # The first display is the summary (then the chart, as SVG).
    texts = [m["content"]["data"]["text/plain"] for m in outputs if m["msg_type"] == "display_data"
             and "text/plain" in m["content"]["data"]]
    assert texts, outputs
    text = texts[0]
    assert text.startswith("live: "), text
    assert "f32[1024, 1024] 4.0 MiB on cpu:0, made by exp" in text, text
    assert any(m["msg_type"] == "display_data" and m["content"]["data"].get("image/svg+xml", "").startswith("<svg")
               for m in outputs)
    code = """eager::memory::set_limit(Some(eager::memory::live_bytes_on(Device::cpu()) + (1 << 20)));
let r = Tensor::zeros(&[2048, 1024], DType::F32);
eager::memory::set_limit(None);
r?"""
    content, outputs = run(kc, code)
    assert content["status"] == "error"
    assert content["ename"] == "OutOfMemoryError", content
    assert "asked for 8.0 MiB" in content["evalue"], content["evalue"]
    assert "largest live tensors: f32[1024, 1024] 4.0 MiB on cpu:0, made by exp" in content["evalue"]


def test_interrupt_stops_a_long_loop_and_keeps_variables(kernel):
    km, kc = kernel
    content, _ = run(kc, "let kept = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3])?;")
    assert content["status"] == "ok"
    msg_id = kc.execute("let mut x = kept.clone(); loop { x = &x + 1.0; }")
    time.sleep(4)
    km.interrupt_kernel()
    reply = kc.get_shell_msg(timeout=60)
    assert reply["parent_header"]["msg_id"] == msg_id
    # The loop's next op fails with eager's Interrupted error; `+` (an operator, which cannot
    # return it) panics with it.
    assert reply["content"]["status"] == "error", reply["content"]
    interrupted = (reply["content"]["ename"], reply["content"]["evalue"])
    assert interrupted == ("panic", "add: interrupted"), reply["content"]
    content, outputs = run(kc, "kept.sum_all()?")
    assert content["status"] == "ok"
    assert results(outputs) == ["tensor(6.0000, shape=[], dtype=f32, device=cpu:0)"]


def test_sigint_to_the_kernel_pid_interrupts_the_cell_and_the_kernel_lives(kernel):
    """A kernelspec with `interrupt_mode: signal`, `kill -INT` or a terminal's Ctrl-C: SIGINT
    does what ipykernel does with it, never ends the kernel."""
    km, kc = kernel
    pid = km.provisioner.process.pid
    content, _ = run(kc, "let kept_sig = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3])?;")
    assert content["status"] == "ok"
    # Idle: nothing happens.
    os.kill(pid, signal.SIGINT)
    time.sleep(1)
    assert km.is_alive(), "SIGINT ended an idle kernel"
    content, outputs = run(kc, "kept_sig.sum_all()?")
    assert content["status"] == "ok" and results(outputs) == ["tensor(6.0000, shape=[], dtype=f32, device=cpu:0)"]
    # A running cell is interrupted; its variables stay.
    msg_id = kc.execute("let mut x = kept_sig.clone(); loop { x = &x + 1.0; }")
    time.sleep(4)
    os.kill(pid, signal.SIGINT)
    reply = kc.get_shell_msg(timeout=60)
    assert reply["parent_header"]["msg_id"] == msg_id
    assert reply["content"]["status"] == "error", reply["content"]
    interrupted = (reply["content"]["ename"], reply["content"]["evalue"])
    assert interrupted == ("panic", "add: interrupted"), reply["content"]
    assert km.is_alive(), "SIGINT ended the kernel"
    content, outputs = run(kc, "kept_sig.to_vec::<f32>()?")
    assert content["status"] == "ok" and results(outputs) == ["[1.0, 2.0, 3.0]"], outputs


def child_pids(pid):
    kids = []
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def alive(pid):
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_restart_resets_the_count_and_shutdown_leaves_no_process():
    km, kc = start_new_kernel(kernel_name="eager", startup_timeout=STARTUP)
    try:
        # The first cell of a fresh kernel waits for its session (as long as a start may take).
        run(kc, "let a = 1;", timeout=STARTUP)
        content, outputs = run(kc, "a + 1")
        assert content["execution_count"] == 2
        assert content["status"] == "ok" and results(outputs) == ["2"], "`a` is known before the restart"
        km.restart_kernel(now=False)
        kc.wait_for_ready(timeout=STARTUP)
        # A new cell works, counted from 1.
        content, outputs = run(kc, "7 * 6", timeout=STARTUP)
        assert content["status"] == "ok" and content["execution_count"] == 1, content
        assert results(outputs) == ["42"]
        # The variable of the old kernel is gone.
        content, outputs = run(kc, "a")
        assert content["status"] == "error", content
        unknown = (content["ename"], content["evalue"])
        assert unknown == ("CompilationError", "cannot find value `a` in this scope"), content
        assert [e["ename"] for e in errors(outputs)] == ["CompilationError"], outputs

        pid = km.provisioner.process.pid
        kids = child_pids(pid)
        assert kids, "the kernel runs cells in a child process"
        # Before the shutdown, what must go afterwards is there: the processes, and the
        # control socket (in the per-user runtime dir).
        assert all(alive(p) for p in [pid, *kids]), [(p, alive(p)) for p in [pid, *kids]]
        run_dir = (pathlib.Path(os.environ["XDG_RUNTIME_DIR"]) / "eager" if os.environ.get("XDG_RUNTIME_DIR")
                   else pathlib.Path(tempfile.gettempdir()) / f"eager-{os.geteuid()}")
        assert len(list(run_dir.glob(f"control-{pid}-*.sock"))) == 1, sorted(run_dir.iterdir())
        km.shutdown_kernel(now=False)
        # A guard against a hang, not a claim about speed.
        deadline = time.time() + 60
        while time.time() < deadline and any(alive(p) for p in [pid, *kids]):
            time.sleep(0.2)
        assert not any(alive(p) for p in [pid, *kids]), "a kernel process outlived shutdown"
        # Nor does its control socket.
        assert not list(run_dir.glob(f"control-{pid}-*.sock")), "the kernel's control socket outlived it"
    finally:
        kc.stop_channels()
        if km.is_alive():
            km.shutdown_kernel(now=True)


def errors(outputs):
    return [m["content"] for m in outputs if m["msg_type"] == "error"]


def test_kernel_info_is_answered_while_the_session_starts():
    from jupyter_client.manager import KernelManager
    km = KernelManager(kernel_name="eager")
    started = time.time()
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    try:
        msg_id = kc.kernel_info()
        reply = kc.get_shell_msg(timeout=60)
        took = time.time() - started
        print(f"kernel_info answered {took:.2f} s after the kernel process started")
        assert reply["parent_header"]["msg_id"] == msg_id
        assert reply["content"]["status"] == "ok" and reply["content"]["language_info"]["name"] == "rust"
        # Completion answers at once from the index of public names, before rust-analyzer is up.
        for code, want in [("Tensor::ze", "zeros"), ("String::fro", "from"), (":pro", ":profile")]:
            kc.complete(code, len(code))
            matches = kc.get_shell_msg(timeout=10)["content"]["matches"]
            assert want in matches, (code, matches)
        # A cell sent at once waits for the session, then runs; busy and idle frame each request.
        content, outputs = run(kc, "40 + 2", timeout=STARTUP)
        assert content["status"] == "ok" and results(outputs) == ["42"]
        states = [m["content"]["execution_state"] for m in outputs if m["msg_type"] == "status"]
        assert states[0] == "busy" and states[-1] == "idle", states
        # One reply per request: nothing stale is left on the shell channel.
        time.sleep(0.5)
        assert not kc.shell_channel.msg_ready()
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


SHAPE_MISMATCH = "Tensor::ones(&[2], DType::F32)?.add(&Tensor::ones(&[3], DType::F32)?)"


def test_a_question_mark_error_is_an_error_reply(kernel):
    _, kc = kernel
    content, outputs = run(kc, SHAPE_MISMATCH + "?")
    assert content["status"] == "error", content
    assert content["ename"] == "ShapeError", content
    assert content["evalue"] == "add: shape error: shapes [2] and [3] cannot be broadcast together", content
    assert content["traceback"], content
    [err] = errors(outputs)
    assert err["ename"] == "ShapeError" and "cannot be broadcast" in err["evalue"]
    # Not only eager's errors: any error a `?` returns fails the cell, named by its type where known.
    content, outputs = run(kc, 'let n: i32 = "x1".parse()?;')
    assert content["status"] == "error", content
    assert content["evalue"] == "invalid digit found in string", content
    assert errors(outputs)


def test_a_result_ending_a_cell_shows_its_value_or_fails(kernel):
    _, kc = kernel
    content, outputs = run(kc, "Tensor::ones(&[2], DType::F32)")
    assert content["status"] == "ok"
    [shown] = [m["content"]["data"] for m in outputs if m["msg_type"] == "execute_result"]
    assert shown["text/plain"].startswith("tensor([1.0000, 1.0000], shape=[2], dtype=f32"), shown
    assert "eager-tensor" in shown["text/html"], shown
    content, outputs = run(kc, "Tensor::ones(&[4], DType::F32)?.sum_all()?.item::<f32>()")
    assert content["status"] == "ok" and results(outputs) == ["4.0"], outputs
    content, outputs = run(kc, SHAPE_MISMATCH)
    assert content["status"] == "error" and content["ename"] == "ShapeError", content
    assert not results(outputs), "an Err is not shown as a value"
    content, outputs = run(kc, 'std::fs::read_to_string("/nonexistent/eager")')
    assert content["status"] == "error" and content["ename"] == "Error", content
    assert "No such file" in content["evalue"], content


def test_completion_matches_are_names_with_signatures_in_metadata(kernel):
    _, kc = kernel
    code = "String::fro"
    kc.complete(code, len(code))
    reply = kc.get_shell_msg(timeout=120)["content"]
    matches = reply["matches"]
    assert "from" in matches and "from_utf8" in matches, matches
    assert not any("(" in m for m in matches), matches
    assert reply["cursor_start"] == len("String::") and reply["cursor_end"] == len(code)
    types = reply["metadata"]["_jupyter_types_experimental"]
    by_text = {t["text"]: t for t in types}
    assert by_text["from_utf8"]["type"] == "function", by_text["from_utf8"]
    assert "(" in by_text["from_utf8"]["signature"], by_text["from_utf8"]


def test_a_notebook_stops_at_a_failing_cell(tmp_path):
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    from nbformat.v4 import new_code_cell, new_notebook
    before, marker = tmp_path / "before", tmp_path / "after"
    nb = new_notebook(cells=[
        new_code_cell(f'let a = Tensor::ones(&[2], DType::F32)?; std::fs::write("{before}", "ran")?;'),
        new_code_cell("a.add(&Tensor::ones(&[3], DType::F32)?)?"),
        new_code_cell(f'std::fs::write("{marker}", "ran")?;'),
    ])
    client = NotebookClient(nb, kernel_name="eager", timeout=300, startup_timeout=STARTUP)
    with pytest.raises(CellExecutionError) as failed:
        client.execute()
    assert "ShapeError" in str(failed.value)
    # A cell that runs writes its marker (the one before the failing cell did): the one after
    # did not run.
    assert before.read_text() == "ran", "the cell before the failing one ran"
    assert not marker.exists(), "nbclient ran on past the failing cell"


def test_autocast_meta_command_sets_the_session_policy(kernel):
    km, kc = kernel
    content, outputs = run(kc, ":autocast bf16")
    assert content["status"] == "ok", content
    text = "".join(m["content"].get("data", {}).get("text/plain", "") for m in outputs if m["msg_type"] == "display_data")
    assert "autocast bf16" in text, outputs
    code = "Tensor::ones(&[2, 2], DType::F32)?.matmul(&Tensor::ones(&[2, 2], DType::F32)?)?.dtype()"
    content, outputs = run(kc, code)
    assert content["status"] == "ok", content
    assert results(outputs) == ["BF16"], outputs
    # Sums run in f32 under autocast, whatever their input.
    content, outputs = run(kc, "Tensor::ones(&[2], DType::BF16)?.sum_all()?.dtype()")
    assert results(outputs) == ["F32"], outputs
    content, outputs = run(kc, ":autocast off")
    assert content["status"] == "ok", content
    content, outputs = run(kc, code)
    assert results(outputs) == ["F32"], outputs
