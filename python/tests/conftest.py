import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # the kvcheck checkout


@pytest.fixture(scope="session")
def root():
    return ROOT


def load_example(name):
    """A module of python/examples/ (they are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "python" / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
