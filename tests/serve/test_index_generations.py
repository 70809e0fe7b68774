"""An index that lives: `eor index add/merge/delete` on a built index, and a running service moving
to each new generation while clients ask, without a failed request (real Ray Serve, Lucene, faiss
with Wiki in two index-shard actors that load the merged base; a SmolLM2 reader reading two
retrievers)."""
from __future__ import annotations

import json
import threading
import time

import grpc
import pytest

from protos import eor_pb2, eor_pb2_grpc

pytestmark = pytest.mark.slow

NEW = {"id": "new-zorblat", "title": "Zorblat Quenfield",
       "text": "Zorblat Quenfield is a lake in the north of Vexland, named for the glassmaker Ilse Zorblat."}


def test_index_add_and_delete_move_a_running_service_without_a_failed_ask(tmp_path, monkeypatch):
    from itertools import islice

    from retrievers.corpus import read_embedded
    from serve.app.application import LocalService
    from serve.builder import build_indexes
    from serve.cli import main
    from serve.config import config_from_dict
    from serve.engine.models import models_dir
    from retrievers.encoder import Encoder

    model = models_dir() / "smollm2-135m"  # resolved before EOR_HOME moves to the temp folder
    if not (model / "config.json").exists():
        pytest.fail("reader model not prepared: run ./setup.sh --tests (eor models prepare smollm2-135m)")
    monkeypatch.setenv("EOR_HOME", str(tmp_path / "home"))
    docs = list(islice(read_embedded(), 200))
    sources = {"Wiki": {"backend": "dense", "options": {"shard_passages": 64, "index_shards": 2}}, "SE": "lucene"}
    settings = config_from_dict({
        "reader": {"model": str(model)}, "generator": {"model": ""}, "index": {"name": "t", "sources": sources},
        "pool": {"specs": ["Wiki@1", "SE@1"]}, "cache": {"enabled": False},
        "voter": {"weights": "equal", "metrics": ["em"]},
        "service": {"port": 0, "metrics_port": 0, "http_port": 0, "ask_deadline_s": 600}})
    build_indexes(docs, "t", Encoder(), show_progress=False, sources=settings.index.sources)  # Wiki in 2 actors
    svc = LocalService(settings).start()
    try:
        with grpc.insecure_channel(svc.address) as ch:
            stub = eor_pb2_grpc.EorStub(ch)
            q = "which lake is named for the glassmaker Ilse Zorblat"
            assert stub.Health(eor_pb2.HealthRequest(), timeout=120).index_generations == ["Wiki: 0", "SE: 0"]
            first = stub.Ask(eor_pb2.AskRequest(question=q), timeout=600)
            assert all(p.id != NEW["id"] for p in first.passages)

            codes, stop = [], threading.Event()

            def client():  # asks across both swaps; every reply counted
                while not stop.is_set():
                    try:
                        stub.Ask(eor_pb2.AskRequest(question=q), timeout=600)
                        codes.append("OK")
                    except grpc.RpcError as exc:
                        codes.append(exc.code().name)
            threads = [threading.Thread(target=client) for _ in range(4)]
            for t in threads:
                t.start()
            added = tmp_path / "add.jsonl"
            added.write_text(json.dumps(NEW) + "\n")
            config = tmp_path / "eor.yaml"
            config.write_text(json.dumps({"index": {"name": "t", "sources": sources}}))  # YAML reads JSON
            assert main(["index", "add", str(added), "--config", str(config), "--json"]) == 0
            moved = _wait_for(stub, ["Wiki: 1", "SE: 1"])
            r = stub.Ask(eor_pb2.AskRequest(question=q), timeout=600)
            assert NEW["id"] in {p.id for p in r.passages} or any("Zorblat" in p.title for p in r.passages)
            assert main(["index", "merge", "--config", str(config), "--json"]) == 0  # a new base: shards reload
            _wait_for(stub, ["Wiki: 2", "SE: 2"])
            r = stub.Ask(eor_pb2.AskRequest(question=q), timeout=600)
            assert NEW["id"] in {p.id for p in r.passages} or any("Zorblat" in p.title for p in r.passages)
            assert main(["index", "delete", NEW["id"], "--config", str(config), "--json"]) == 0
            _wait_for(stub, ["Wiki: 3", "SE: 3"])
            stop.set()
            for t in threads:
                t.join(timeout=600)
            r = stub.Ask(eor_pb2.AskRequest(question=q), timeout=600)
            assert all(p.id != NEW["id"] and "Zorblat" not in p.title for p in r.passages)
            print(f"moved to generation 1 in {moved:.1f} s; {len(codes)} Asks across the three swaps")
            assert codes and set(codes) == {"OK"}, codes  # no failed Ask across either swap
    finally:
        svc.stop()


def _wait_for(stub, generations: list[str], limit_s: float = 300.0) -> float:
    t0 = time.time()
    while time.time() - t0 < limit_s:
        got = list(stub.Health(eor_pb2.HealthRequest(), timeout=120).index_generations)
        if got == generations:
            return time.time() - t0
        time.sleep(0.5)
    raise AssertionError(f"the service did not move to {generations} in {limit_s} s")
