"""examples/example_5_es_cartpole.py runs as written and its search solves CartPole."""
import contextlib
import importlib.util
import io
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "example_5_es_cartpole.py"


def test_example_search_solves_cartpole():
    spec = importlib.util.spec_from_file_location("example_5_es_cartpole", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        total = module.search(seed=0, generations=30)
    assert total == 500.0, out.getvalue()[-2000:]
    assert "generation 0:" in out.getvalue()
