"""torch CPU tensors: in this python3 when it has torch, else through Debian's /usr/bin/python3
(python3-torch, which ci/install-deps.sh installs) when it is the same CPython minor version, so
that the extension built here loads there."""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kvcheck

SCRIPT = Path(__file__).with_name("torch_interop.py")


def other_python_with_torch():
    exe = "/usr/bin/python3"
    if not os.path.exists(exe) or os.path.realpath(exe) == os.path.realpath(sys.executable):
        return None
    probe = subprocess.run([exe, "-c", "import sys, torch, numpy; print(sys.version_info[:2])"],
                           capture_output=True, text=True)
    if probe.returncode != 0 or probe.stdout.strip() != str(tuple(sys.version_info[:2])):
        return None
    return exe


def test_torch_cpu_tensors(tmp_path):
    if importlib.util.find_spec("torch") is not None:
        exe = sys.executable
    else:
        exe = other_python_with_torch()
        if exe is None:
            pytest.skip("no python3 with torch and this CPython version (ci/install-deps.sh installs python3-torch)")
    # The package alone on the other python's path (not this one's site-packages and its numpy).
    shutil.copytree(Path(kvcheck.__file__).resolve().parent, tmp_path / "kvcheck",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    r = subprocess.run([exe, str(SCRIPT)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "interop checks passed" in r.stdout
