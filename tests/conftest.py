"""Installs the freshly built eager-kernel into a temporary Jupyter path for the tests."""
import os
import pathlib
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
KERNEL = ROOT / "target" / "release" / "eager-kernel"

_prefix = tempfile.mkdtemp(prefix="eager-jupyter-")
subprocess.run([str(KERNEL), "install", "--prefix", _prefix], check=True)
os.environ["JUPYTER_PATH"] = os.path.join(_prefix, "share", "jupyter")
