"""eor on a real two-node Ray cluster formed on this machine (bench/cluster.py): the app
deployed across both nodes by the config's placement, Health naming each deployment's node,
Asks answered; then the worker node SIGKILLed under load: no Ask OK with an empty answer, no
traceback in a status, Health names what is gone, and Asks are whole again within 3 minutes
once the node rejoins. SmolLM2 reads (2 cores)."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def test_two_nodes_answer_and_survive_losing_the_worker(tmp_path):
    from bench.cluster import main
    from serve.engine.models import models_dir

    if not (models_dir() / "smollm2-135m" / "config.json").exists():
        pytest.fail("reader model not prepared: run ./setup.sh --tests (eor models prepare smollm2-135m)")
    out = tmp_path / "cluster.json"
    assert main(["--cold", "1", "-n", "12", "-c", "8", "--kill-after", "10", "--rejoin-after", "15",
                 "--port", "6397", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    placement = r["health"]["placement"]
    head = {p.split(": ", 1)[1].split()[0] for p in placement if p.startswith(("Reader", "Voter"))}
    worker = {p.split(": ", 1)[1].split()[0] for p in placement if p.startswith(("Source_", "Retrievers_"))}
    assert len(head) == 1 and len(worker) == 1 and head != worker, placement  # two nodes, as placed
    assert sum(p.startswith("Retrievers_") for p in placement) == 16  # per-spec across the worker
    loss = r["node_loss"]
    assert loss["ok_with_empty_answer"] == 0
    assert all("Traceback" not in (e.get("details") or "") and "\n" not in (e.get("details") or "")
               for e in loss["timeline"] if e["kind"] == "ask")
    assert loss["health_names_missing_after_s"] is not None
    assert loss["whole_again_after_s"] is not None and loss["whole_again_after_s"] <= 180
    assert r["health_after"]["status"] == "SERVING" and not r["health_after"]["unavailable"]
