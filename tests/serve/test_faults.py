"""The fault run of tests/bench/serve-faults at a size CI affords: 500 requests from 64 clients, twice (1,000 in all),
10% hanging up mid-stream and 5% malformed (each expecting its own 4xx and named parameter), every
well-formed answer compared with the same prompt's answer sent alone, no key/value block held once
idle, and SIGTERM exiting 0. The script exits 1 on any of those."""

import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "bench" / "serve-faults"


def test_the_fault_run_loses_nothing():
    r = subprocess.run([sys.executable, str(SCRIPT), "--requests", "500", "--concurrency", "64", "--max-batch", "16"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok: every well-formed request right" in r.stdout, r.stdout
    assert r.stdout.count("server up: True; key/value blocks in use once idle: 0") == 2, r.stdout
