"""eor on a real two-node Ray cluster formed on this machine (bench/cluster.py): the app
deployed across both nodes by the config's placement, Health naming each deployment's node,
Asks answered; then the worker node SIGKILLed under load: no Ask OK with an empty answer, no
traceback in a status, Health names what is gone, and Asks are whole again once the node rejoins,
within three times what the same run took to start (bench/cluster.py: recovery_limit_s; no
wall-clock bound of its own: a slower machine is not a failure). SmolLM2 reads (2 cores)."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow

# both sources, rerank, concatenation, the reader's own knowledge and no retrieval: six per-spec actors on
# the worker; the reader eager (its own temp EOR_HOME has no compile cache: else a compiled engine compiles
# beside the eager one through the start and the node loss, on a 2-core fp32 machine 885 s in all)
SPECS = ["Wiki@10", "SE@1", "SE@RR@10", "SE@2&Wiki@5", "PK", "ReFree"]
QUESTIONS = ["who wrote the novel moby dick", "what is the largest planet in the solar system",
             "who painted the sistine chapel ceiling", "what is the capital city of australia",
             "who discovered penicillin", "when did the first man land on the moon",
             "what is the chemical symbol for gold", "who composed the four seasons",
             "how many bones are in the adult human body", "what language is spoken in brazil"]


def test_two_nodes_answer_and_survive_losing_the_worker(tmp_path, monkeypatch):
    """Self-contained, as CI runs it (`./setup.sh --tests` builds no index; no ../shared/data):
    its own EOR_HOME with a 300-article index of the embedded corpus, its own questions."""
    from itertools import islice

    from bench.cluster import main
    from retrievers.corpus import read_embedded
    from retrievers.encoder import Encoder
    from serve.builder import build_indexes
    from serve.engine.models import models_dir

    model = models_dir() / "smollm2-135m"  # resolved before EOR_HOME moves to the temp folder
    if not (model / "config.json").exists():
        pytest.fail("reader model not prepared: run ./setup.sh --tests (eor models prepare smollm2-135m)")
    monkeypatch.setenv("EOR_HOME", str(tmp_path / "home"))  # the nodes `ray start` inherits it
    build_indexes(list(islice(read_embedded(), 300)), "t", Encoder(), show_progress=False)
    out = tmp_path / "cluster.json"
    questions = tmp_path / "questions.jsonl"  # its own: CI has no ../shared/data
    questions.write_text("".join(json.dumps({"question": q, "answers": [], "dataset": "nq-open-oracle"}) + "\n"
                                 for q in QUESTIONS), encoding="utf-8")
    assert main(["--model", str(model), "--index", "t", "--cold", "1", "-n", "12", "-c", "8", "--kill-after", "10", "--rejoin-after", "15",
                 "--questions", str(questions), "--offset", "0", "--port", "6397", "--specs", *SPECS, "--eager",
                 "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    placement = r["health"]["placement"]
    head = {p.split(": ", 1)[1].split()[0] for p in placement if p.startswith(("Reader", "Voter"))}
    worker = {p.split(": ", 1)[1].split()[0] for p in placement if p.startswith(("Source_", "Retrievers_"))}
    assert len(head) == 1 and len(worker) == 1 and head != worker, placement  # two nodes, as placed
    assert sum(p.startswith("Retrievers_") for p in placement) == len(SPECS)  # per-spec, on the worker
    loss = r["node_loss"]
    assert loss["ok_with_empty_answer"] == 0
    assert all("Traceback" not in (e.get("details") or "") and "\n" not in (e.get("details") or "")
               for e in loss["timeline"] if e["kind"] == "ask")
    assert loss["health_names_missing_after_s"] is not None
    assert loss["whole_again_after_s"] is not None and loss["whole_again_after_s"] <= loss["whole_again_limit_s"]
    assert r["health_after"]["status"] == "SERVING" and not r["health_after"]["unavailable"]
