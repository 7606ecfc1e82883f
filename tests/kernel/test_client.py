"""The eager kernel under a real jupyter_client: signatures, interrupt, restart, shutdown."""
import os
import pathlib
import time

import pytest
import zmq
from jupyter_client.manager import start_new_kernel
from jupyter_client.session import Session

STARTUP = 900  # the first kernel of a fresh machine builds eager into its evcxr session


@pytest.fixture(scope="module")
def kernel():
    km, kc = start_new_kernel(kernel_name="eager", startup_timeout=STARTUP)
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
    # The kernel is still serving properly signed requests.
    content, outputs = run(kc, "40 + 2")
    assert content["status"] == "ok" and results(outputs) == ["42"]


def test_interrupt_stops_a_long_loop_and_keeps_variables(kernel):
    km, kc = kernel
    content, _ = run(kc, "let kept = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3])?;")
    assert content["status"] == "ok"
    msg_id = kc.execute("let mut x = kept.clone(); loop { x = &x + 1.0; }")
    time.sleep(4)
    km.interrupt_kernel()
    reply = kc.get_shell_msg(timeout=60)
    assert reply["parent_header"]["msg_id"] == msg_id
    assert reply["content"]["status"] == "error"
    content, outputs = run(kc, "kept.sum_all()?")
    assert content["status"] == "ok"
    assert results(outputs) == ["tensor(6.0000, shape=[], dtype=f32, device=cpu:0)"]


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
        run(kc, "let a = 1;")
        content, _ = run(kc, "a + 1")
        assert content["execution_count"] == 2
        km.restart_kernel(now=False)
        kc.wait_for_ready(timeout=STARTUP)
        content, outputs = run(kc, "7 * 6")
        assert content["execution_count"] == 1
        assert results(outputs) == ["42"]
        # The variable of the old kernel is gone.
        content, _ = run(kc, "a")
        assert content["status"] == "error"

        pid = km.provisioner.process.pid
        kids = child_pids(pid)
        assert kids, "the kernel runs cells in a child process"
        km.shutdown_kernel(now=False)
        deadline = time.time() + 15
        while time.time() < deadline and any(alive(p) for p in [pid, *kids]):
            time.sleep(0.2)
        assert not any(alive(p) for p in [pid, *kids]), "a kernel process outlived shutdown"
    finally:
        kc.stop_channels()
        if km.is_alive():
            km.shutdown_kernel(now=True)
