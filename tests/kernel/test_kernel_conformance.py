"""The standard kernel checks of jupyter_kernel_test, against the installed eager kernel, with
their default 15 s timeouts from the first request: the kernel takes a warm session from the
session server (as the second kernel of a day does), so no warm-up cell runs first."""
import os
import pathlib
import signal
import subprocess
import tempfile
import unittest

import jupyter_kernel_test as jkt
from jupyter_client.kernelspec import KernelSpecManager


def processes_naming(needle):
    found = []
    for p in pathlib.Path("/proc").iterdir():
        try:
            if p.name.isdigit() and needle in (p / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(p.name))
        except OSError:
            pass
    return found


class EagerKernelTests(jkt.KernelTests):
    kernel_name = "eager"

    @classmethod
    def setUpClass(cls):
        # A session server of this test's own (its runtime dir), warmed before the kernel starts:
        # `eager-kernel warm` returns once a session is ready to hand over.
        cls.runtime = tempfile.mkdtemp(prefix="eager-conformance-")
        cls.own_env = {"XDG_RUNTIME_DIR": cls.runtime, "EAGER_SESSION_SERVER": "1", "EAGER_SESSION_IDLE_SECS": "600"}
        # Put back as they were after: a later test must not find the server turned on.
        cls.saved_env = {k: os.environ.get(k) for k in cls.own_env}
        os.environ.update(cls.own_env)
        kernel = KernelSpecManager().get_kernel_spec(cls.kernel_name).argv[0]
        subprocess.run([kernel, "warm"], check=True, timeout=1800)
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        subprocess.run([KernelSpecManager().get_kernel_spec(cls.kernel_name).argv[0], "stop-server"],
                       check=True, timeout=60)
        for pid in processes_naming(cls.runtime):
            os.kill(pid, signal.SIGKILL)
        for k, v in cls.saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    language_name = "rust"
    file_extension = ".rs"

    code_hello_world = 'println!("hello, world");'
    code_stderr = 'eprintln!("an error line");'
    completion_samples = [{"text": "Tens", "matches": {"Tensor"}}]
    complete_code_samples = ["let x = 1;", "fn f() -> i32 {\n    1\n}", "let s = \"{\";"]
    incomplete_code_samples = ["fn f() {", "let v = vec![1,\n2,", "let s = \"open"]
    invalid_code_samples = ["let x = 1);"]
    code_generate_error = 'let n: i32 = "not a number";'
    code_execute_result = [
        {"code": "1 + 2 + 3", "result": "6"},
        {"code": "Tensor::ones(&[2], DType::F32)?.sum_all()?", "result": "tensor(2.0000, shape=[], dtype=f32, device=cpu:0)"},
    ]
    code_display_data = [
        {"code": "viz::Profile::session().timeline()", "mime": "image/svg+xml"},
        {"code": "viz::Profile::session().timeline().as_png().unwrap()", "mime": "image/png"},
        # Written under the temp dir, not the working tree.
        {"code": f":timeline {os.path.join(tempfile.gettempdir(), 'eager-test-timeline.svg')}", "mime": "image/svg+xml"},
    ]
    supported_history_operations = ("tail", "range", "search")
    code_history_pattern = "*1 + 2*"
    # `?name` pages the docs of `name`, as IPython's `?`.
    code_page_something = "?Tensor::zeros"
    code_inspect_sample = "Tensor::zeros"
    code_clear_output = "eager_cell::clear_output();"


if __name__ == "__main__":
    unittest.main()
