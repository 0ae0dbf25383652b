"""kvcheck's pytest plugin (registered through the pytest11 entry point when kvcheck is installed).

Fixtures:
  kv_oracle        the kvcheck module: kv_oracle.check_quantized(x, x_hat, "int4/token"),
                   kv_oracle.check_decode_step(q, keys, values, held, output, ...), ...
  reference_model  a kvcheck.ReferenceModel: --kvcheck-model PATH or $KVCHECK_MODEL, else the
                   embedded kvcheck-tiny model of a kvcheck checkout; skips when there is none.
"""

import os
from pathlib import Path

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("kvcheck")
    group.addoption("--kvcheck-model", default=None,
                    help="model directory or GGUF file for the reference_model fixture (default: $KVCHECK_MODEL)")


@pytest.fixture
def kv_oracle():
    import kvcheck
    return kvcheck


def _default_model():
    # The embedded model of the checkout this package was installed from, when run inside it.
    for base in [Path.cwd(), *Path.cwd().parents]:
        candidate = base / "datasets" / "models" / "kvcheck-tiny"
        if (candidate / "config.json").is_file():
            return candidate
    return None


@pytest.fixture(scope="session")
def reference_model(request):
    import kvcheck
    path = request.config.getoption("--kvcheck-model") or os.environ.get("KVCHECK_MODEL") or _default_model()
    if path is None:
        pytest.skip("no model: pass --kvcheck-model PATH or set KVCHECK_MODEL (a model directory or GGUF file)")
    return kvcheck.ReferenceModel(path)
