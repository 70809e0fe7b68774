"""fitting/ is pure Python over arrays and results: it imports retrievers/ and voter/, never the
serving stack (serve/, Ray, vLLM), so a fit runs without a service and the service without it
(tests/test_house.py: the serving path never reaches fitting/)."""
from pathlib import Path

from tests.voter.test_boundaries import imported_modules

FITTING = Path(__file__).resolve().parents[2] / "fitting"
FORBIDDEN = {"serve", "ray", "vllm", "bench"}


def test_no_fitting_module_imports_the_serving_stack():
    files = sorted(FITTING.glob("*.py"))
    assert len(files) >= 10
    bad = {f.name: sorted(m for m in imported_modules(f) if m.split(".")[0] in FORBIDDEN) for f in files}
    assert not any(bad.values()), bad
