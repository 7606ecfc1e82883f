"""Sessions that never outlive their front end and interrupts that are never lost, under a real
jupyter_client, with a session server of this module's own (its own runtime dir):
- kernels shut down with `shutdown_kernel(now=True)` at every moment of their start leave no
  session process behind (only the server's unclaimed spares, 10 s later);
- an interrupt sent while the kernel's session is still starting stops the cell when it would
  run (0.1, 1 and 5 s after it was sent), and the kernel goes on;
- a kernel whose launcher is SIGKILLed exits, its session with it (JPY_PARENT_PID);
- `eager-kernel stop-server` ends the server and its spares."""
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest
from jupyter_client.manager import KernelManager

from conftest import KERNEL

STARTUP = 900  # the first session of a fresh machine builds eager into its evcxr session


def processes():
    """(pid, parent, state, command line) of every process."""
    found = []
    for p in pathlib.Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmdline = (p / "cmdline").read_bytes().decode(errors="replace").replace("\0", " ").strip()
            stat = (p / "stat").read_text()
        except OSError:
            continue
        state, parent = stat[stat.rfind(")") + 2:].split(" ")[:2]
        if state != "Z":
            found.append((int(p.name), int(parent), state, cmdline))
    return found


def alive(pid):
    return any(p == pid for p, *_ in processes())


def wait_until(what, check, limit):
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, f"{what} after {limit} s"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def runtime():
    rt = tempfile.mkdtemp(prefix="eager-sessions-")
    env = {**os.environ, "XDG_RUNTIME_DIR": rt, "EAGER_SESSION_SERVER": "1", "EAGER_SESSION_IDLE_SECS": "900",
           "EAGER_SESSION_SPARE_DELAY_MS": "0", "EAGER_SESSION_SPARES": "1"}
    subprocess.run([str(KERNEL), "warm"], check=True, timeout=STARTUP, env=env)
    yield rt, env
    subprocess.run([str(KERNEL), "stop-server"], check=True, timeout=60, env=env)
    for pid, *_ in processes_of(rt):
        os.kill(pid, signal.SIGKILL)


def processes_of(rt):
    """The server, its sessions and their cell processes (children of a session)."""
    procs = processes()
    mine = {p for p, _, _, c in procs if rt in c}
    cells = {p for p, parent, _, _ in procs if parent in mine}
    return [x for x in procs if x[0] in mine | cells]


def sessions(rt):
    """The server's session processes: (pid, its socket, whether that socket still exists, i.e.
    whether it is an unclaimed spare)."""
    out = []
    for pid, _, _, cmd in processes():
        if "--eager-session-worker" in cmd and rt in cmd:
            sock = cmd.split("--eager-session-worker", 1)[1].strip()
            out.append((pid, sock, os.path.exists(sock)))
    return out


def start_kernel(env):
    km = KernelManager(kernel_name="eager")
    km.start_kernel(env=env)
    return km


@pytest.mark.parametrize("when", [0.0, 0.3, 1.0, 2.5, 6.0, 12.0])
def test_a_kernel_shut_down_at_any_moment_of_its_start_leaves_no_session(runtime, when):
    rt, env = runtime
    km = start_kernel(env)
    kc = km.client()
    kc.start_channels()
    # Positive control: this kernel has asked for a session, or will.
    time.sleep(when)
    kernel_pid = km.provisioner.pid
    assert alive(kernel_pid)
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    assert not alive(kernel_pid)
    # A session handed to it ends within 10 s; the server's spare (unclaimed, its socket there)
    # stays, one of it, with its cell process.
    def settled():
        s = sessions(rt)
        return len(s) <= 1 and all(unclaimed for _, _, unclaimed in s)
    wait_until(f"session processes outlive their front end: {sessions(rt)}", settled, 10 + 1)
    # And one spare is (or becomes) ready for the next kernel.
    wait_until("no spare", lambda: len(sessions(rt)) == 1, 120)


@pytest.mark.parametrize("delay", [0.1, 1.0, 5.0])
def test_an_interrupt_while_the_session_starts_stops_the_cell(runtime, delay):
    rt, env = runtime
    # A first kernel takes the ready spare: the second one's session is still starting.
    first = start_kernel(env)
    fc = first.client()
    fc.start_channels()
    fc.wait_for_ready(timeout=60)
    assert fc.execute_interactive("1 + 1", timeout=STARTUP)["content"]["status"] == "ok"
    km = start_kernel(env)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        marker = pathlib.Path(rt) / f"ran-{delay}"
        msg_id = kc.execute(f'std::fs::write("{marker}", "ran")?; loop {{ std::thread::sleep(std::time::Duration::from_millis(50)); }}')
        time.sleep(delay)
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=120)
        assert reply["parent_header"]["msg_id"] == msg_id
        content = reply["content"]
        assert content["status"] == "error", content
        # Before the session was up the cell never ran; a session up by then runs it, and the
        # interrupt kills its cell process (a loop with no eager op).
        if marker.exists():
            assert delay >= 5.0, f"the cell ran though interrupted {delay} s after it was sent"
            assert content["ename"] == "SubprocessTerminated" and "restarted" in content["evalue"], content
        else:
            assert content["ename"] == "Interrupted", content
            assert "before it ran" in content["evalue"], content
        # The kernel goes on.
        after = kc.execute_interactive("40 + 2", timeout=STARTUP)["content"]
        assert after["status"] == "ok", after
    finally:
        for m, c in ((km, kc), (first, fc)):
            c.stop_channels()
            m.shutdown_kernel(now=True)


LAUNCHER = textwrap.dedent("""
    import sys, time
    from jupyter_client.manager import KernelManager
    km = KernelManager(kernel_name="eager")
    km.start_kernel()
    kc = km.client(); kc.start_channels(); kc.wait_for_ready(timeout=60)
    print(km.provisioner.pid, flush=True)
    kc.execute_interactive("1 + 1", timeout=900, output_hook=lambda m: None)
    print("ran", flush=True)
    time.sleep(3600)
""")


def test_a_kernel_exits_when_the_process_that_launched_it_dies(runtime):
    rt, env = runtime
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER], env=env, stdout=subprocess.PIPE, text=True)
    try:
        kernel_pid = int(launcher.stdout.readline())
        assert launcher.stdout.readline().strip() == "ran"
        # Its session: the one session process whose socket is gone (claimed).
        claimed = [pid for pid, _, unclaimed in sessions(rt) if not unclaimed]
        assert len(claimed) == 1, sessions(rt)
        assert alive(kernel_pid)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        wait_until("the kernel outlives its launcher", lambda: not alive(kernel_pid), 10)
        wait_until("its session outlives the kernel", lambda: not alive(claimed[0]), 10)
    finally:
        launcher.kill()
        launcher.wait()


def test_stop_server_ends_the_server_and_its_spares(runtime):
    rt, env = runtime
    wait_until("no spare", lambda: len(sessions(rt)) == 1, 120)
    server = [p for p, _, _, c in processes() if "--eager-session-server" in c and rt in c]
    assert len(server) == 1
    out = subprocess.run([str(KERNEL), "stop-server"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "stopped 1 session server" in out.stderr, out.stderr
    wait_until(f"left running: {processes_of(rt)}", lambda: not processes_of(rt), 10)
    # The next kernel gets a new server.
    subprocess.run([str(KERNEL), "warm"], check=True, timeout=STARTUP, env=env)
    assert [p for p, _, _, c in processes() if "--eager-session-server" in c and rt in c] != server
