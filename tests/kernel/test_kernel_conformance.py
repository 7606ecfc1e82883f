"""The standard kernel checks of jupyter_kernel_test, against the installed eager kernel."""
import os
import tempfile
import unittest

import jupyter_kernel_test as jkt


class EagerKernelTests(jkt.KernelTests):
    kernel_name = "eager"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # The kernel answers kernel_info at once and starts its Rust session behind it; the
        # standard checks give each request 15 s, so wait for the session first (a silent
        # cell, which counts nothing).
        reply = cls.kc.execute_interactive("", silent=True, store_history=False, timeout=900)
        assert reply["content"]["status"] == "ok", reply
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
