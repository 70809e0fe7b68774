"""Two readers in the service (issue 33, item 2): one Reader deployment per served reader, each
member's prompts to its own reader's deployment, Generate on the configured generator model
(shared with the reader that runs it), Health over every reader; and which model "auto" gives
Generate. The wiring is checked without Ray (the app's deployment graph, Health over stand-in
handles); one test serves it under Ray Serve with one stand-in engine per reader model."""
from __future__ import annotations

import asyncio

import pytest

from protos import eor_pb2
from retrievers.spec import PAPER_POOL
from serve.config import GENERATOR_AUTO, config_from_dict
from serve.config_readers import generator_model, generator_reader, reader_config
from serve.engine.models import DEFAULT_READER, STRONG_READER

FAKES = "tests.serve.service_fakes"
PAIRED = ["Wiki@10", "Wiki@10~1.5B", "PK~1.5B", "SE@1"]  # the default reader's and the 1.5B's members


def _prepare(models, name: str) -> None:
    """A model folder as `eor models prepare` leaves it (what resolve_model looks for)."""
    (models / name).mkdir(parents=True)
    (models / name / "config.json").write_text("{}")


# ---- Generate's model --------------------------------------------------------------------------
def test_generate_defaults_to_the_strong_reader_only_when_it_is_prepared(tmp_path, monkeypatch):
    from serve.cli.service import engines_line
    from serve.paths import models_dir

    monkeypatch.setenv("EOR_HOME", str(tmp_path))
    plain = config_from_dict({"pool": {"specs": list(PAPER_POOL)}})
    assert plain.generator.model == GENERATOR_AUTO
    assert generator_model(plain) == DEFAULT_READER  # not prepared: the reader's model, its engine
    assert generator_reader(plain).reader == "" and f"{STRONG_READER} is not prepared" in engines_line(plain)
    _prepare(models_dir(), STRONG_READER)
    assert generator_model(plain) == STRONG_READER
    own = generator_reader(plain)  # no member reads with the 1.5B: Generate gets its own engine ...
    assert (own.reader, own.deployment) == (None, "Generator")
    assert own.settings == reader_config(plain, "1.5B")  # ... with the configured 1.5B reader's settings
    default = generator_reader(config_from_dict({}))  # the default pool reads with it: its engine
    assert (default.reader, default.deployment) == ("1.5B", "Reader_1.5B")
    paired = config_from_dict({"pool": {"specs": PAIRED}, "readers": {"1.5B": {"model": STRONG_READER, "seed": 7}}})
    shared = generator_reader(paired)  # a member reads with it: Generate shares that reader's engine
    assert (shared.reader, shared.deployment, shared.settings.seed) == ("1.5B", "Reader_1.5B", 7)
    assert engines_line(paired) == (f"readers: Reader {DEFAULT_READER}, Reader_1.5B {STRONG_READER}; Generate: "
                                    f"{STRONG_READER} (Reader_1.5B's engine); generator.model auto: the strong reader")
    for model, want in [("", DEFAULT_READER), ("some/folder", "some/folder")]:  # "" = the reader's; a model wins
        assert generator_model(config_from_dict({"generator": {"model": model}})) == want
    other = generator_reader(config_from_dict({"generator": {"model": "some/folder"}, "reader": {"seed": 3}}))
    assert (other.reader, other.settings.model, other.settings.seed) == (None, "some/folder", 3)


# ---- the app's deployment graph (no Ray) ---------------------------------------------------------
def _deployments(settings) -> dict:
    """name -> the deployment as `serve run` builds it (init args: handles for the deployments)."""
    from ray.serve._private.build_app import build_app as flatten

    from serve.app.application import build_app

    return {d.name: d for d in flatten(build_app(settings), name="eor").deployments}


def test_each_served_reader_is_a_deployment_built_from_its_own_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("EOR_HOME", str(tmp_path))
    settings = config_from_dict({
        "pool": {"specs": PAIRED}, "readers": {"1.5B": {"model": "strong", "cpu_kv_cache_gib": 3}, "3B": "unused"},
        "generator": {"model": "strong"},
        "service": {"retriever_actors": "one", "placement": {"Reader_1.5B": {"eor_big": 1}}}})
    deps = _deployments(settings)
    assert {"Reader", "Reader_1.5B"} <= set(deps) and not {"Reader_3B", "Generator"} & set(deps)
    strong = deps["Reader_1.5B"].init_args[0].reader
    assert (strong.model, strong.cpu_kv_cache_gib) == ("strong", 3)  # its own engine settings
    assert deps["Reader"].init_args[0].reader.model == DEFAULT_READER
    assert deps["Reader_1.5B"].ray_actor_options["resources"] == {"eor_big": 1.0}  # service.placement names it
    _, _, _, reader, others = deps["Retrievers_0"].init_args
    assert reader.deployment_name == "Reader" and {n: h.deployment_name for n, h in others.items()} == {
        "1.5B": "Reader_1.5B"}
    assert deps["Voter"].init_args[1].deployment_name == "Reader"  # NLI judging: the default reader
    ingress = deps["EorIngress"].init_args
    assert ingress[6].deployment_name == "Reader_1.5B"  # Generate: the 1.5B's engine, not a second one
    with pytest.raises(ValueError, match=r"unknown deployments \['Reader_7B'\]"):
        config_from_dict({"service": {"placement": {"Reader_7B": {"x": 1}}}})


def test_a_reader_the_voters_rounds_never_ask_starts_on_its_first_request(tmp_path, monkeypatch):
    from dataclasses import replace

    from tests.voter.conftest import TWO_READER_POOL, reader_voter
    from voter.weights_io import save_weights
    from serve.app.deployments import asked_readers

    monkeypatch.setenv("EOR_HOME", str(tmp_path))
    base_voter = reader_voter()
    def keeping(*specs):  # a voter whose one stage asks these members
        kept = tuple(s in specs for s in base_voter.pool)
        w = tuple(0.5 if k else 0.0 for k in kept)
        return replace(base_voter, weights=replace(base_voter.weights, retriever_weights=w, kept=kept))

    voter = keeping("Wiki@10~1.5B")  # asks the 1.5B alone
    path = save_weights(tmp_path / "v.json", voter)
    base = {"pool": {"specs": list(TWO_READER_POOL)}, "readers": {"1.5B": "qwen2.5-coder-1.5b"},
            "service": {"retriever_actors": "one"}}
    settings = config_from_dict({**base, "voter": {"weights": str(path)}})
    assert asked_readers(settings) == {"1.5B"}
    deps = _deployments(settings)
    assert deps["Reader"].init_kwargs == {"lazy": True} and deps["Reader_1.5B"].init_kwargs == {"lazy": False}
    both = save_weights(tmp_path / "both.json", keeping("SE@1", "Wiki@10~1.5B"))
    assert asked_readers(config_from_dict({**base, "voter": {"weights": str(both)}})) == {"", "1.5B"}
    nli = save_weights(tmp_path / "nli.json", replace(voter, metrics=("em", "nli"),
                                                          weights=replace(voter.weights, metric_weights=(0.5, 0.5))))  # the reader judges NLI
    assert asked_readers(config_from_dict({**base, "voter": {"weights": str(nli)}})) == {"", "1.5B"}
    assert asked_readers(config_from_dict({**base, "voter": {"weights": "equal"}})) is None  # every reader starts
    assert asked_readers(config_from_dict({**base, "voter": {"weights": str(tmp_path / "none.json")}})) is None


# ---- Health over every reader (stand-in handles) -----------------------------------------------
class _Remote:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args):
        async def call():
            return self.fn(*args)
        return call()


class _Handle:
    def __init__(self, **methods):
        for name, fn in methods.items():
            setattr(self, name, _Remote(fn))


def _reader(model: str, down: str | None = None, prompts: int = 0) -> _Handle:
    return _Handle(stats=lambda: {"model": model, "prompts": prompts, "cache_hits": 0, "engine_calls": 1,
                                  "engine_prompts": prompts, "mean_batch": 0.0, "prompt_tokens": 0,
                                  "generated_tokens": 0, "cached_tokens": 0, "down": down, "in_flight": 0},
                   model_id=lambda: model, ping=lambda: "", node=lambda: "n")


def _health(readers: dict, generator: str = "1.5B") -> eor_pb2.HealthReply:
    from serve.app.ingress import EorIngress

    settings = config_from_dict({"pool": {"specs": PAIRED}, "voter": {"weights": "equal"}})
    voter = _Handle(weights_source=lambda: "equal weights", node=lambda: "n")
    ingress = EorIngress.func_or_class(settings, [], [], voter, readers[""], generator=readers[generator],
                                       readers={n: h for n, h in readers.items() if n})
    return asyncio.run(ingress._health(eor_pb2.HealthRequest()))


def test_health_lists_every_reader_and_a_dead_second_reader_is_serving_degraded():
    ok = _health({"": _reader("small", prompts=5), "1.5B": _reader("strong", prompts=2)})
    assert ok.status == eor_pb2.HealthReply.SERVING and not ok.detail
    assert [(r.deployment, r.model, r.prompts) for r in ok.readers] == [("Reader", "small", 5),
                                                                        ("Reader_1.5B", "strong", 2)]
    assert (ok.model, ok.reader_prompts, ok.generator_model) == ("small", 5, "strong")  # top level: the default
    down = "reader engine down (EngineDeadError: boom); restarting"
    dead = _health({"": _reader("small"), "1.5B": _reader("strong", down=down)}, generator="")
    assert dead.status == eor_pb2.HealthReply.SERVING and dead.detail == f"degraded: Reader_1.5B: {down}"
    assert [r.down for r in dead.readers] == ["", down] and dead.generator_model == "small"
    silent = _health({"": _reader("small"), "1.5B": _Handle()}, generator="")  # no stats(): not answering
    assert silent.status == eor_pb2.HealthReply.SERVING  # Asks answer from the 0.5B's fallback meanwhile
    assert silent.detail == "degraded: Reader_1.5B: reader not answering: AttributeError"
    first = _health({"": _reader("small", down=down), "1.5B": _reader("strong")}, generator="")
    assert first.status == eor_pb2.HealthReply.NOT_SERVING and first.detail == down  # the default reader: not ready


def test_status_names_each_reader_of_the_running_service():
    from serve.cli.status import describe_serve

    svc = {"address": "127.0.0.1:50051", "serving": True, "generator_model": "strong",
           "readers": [{"deployment": "Reader", "model": "small", "prompts": 4},
                       {"deployment": "Reader_1.5B", "model": "strong", "prompts": 1}]}
    assert describe_serve(svc) == ("eor serve: serving at 127.0.0.1:50051; readers: Reader small (4 prompts), "
                                   "Reader_1.5B strong (1 prompts); Generate: strong")
    assert describe_serve({"address": "a:1", "serving": False}) == "eor serve: none at a:1"


# ---- served: Ray Serve, one stand-in engine per reader model ------------------------------------
def test_each_member_reads_with_its_own_readers_deployment_when_served(tmp_path, monkeypatch):
    """`Wiki@10` and `Wiki@10~1.5B` (with PK~1.5B and SE@1) under Ray Serve: each member's prompts
    reach its own reader's engine (two stand-in engines, their models "small" and "strong"), each
    engine starts once (Generate on "strong" shares Reader_1.5B), Health and the metrics tell the
    readers apart."""
    import time
    import urllib.request

    import grpc
    from ray import serve

    from protos import eor_pb2_grpc
    from serve.app.application import LocalService
    from tests.serve.service_fakes import logged

    monkeypatch.setenv("EOR_HOME", str(tmp_path))
    settings = config_from_dict({
        "reader": {"model": "small", "enforce_eager": True},  # one engine per reader (no eager-then-compiled stages)
        "readers": {"1.5B": "strong"}, "generator": {"model": "strong"},
        "pool": {"specs": PAIRED}, "voter": {"weights": "equal", "metrics": ["em"]},
        "service": {"port": 0, "metrics_port": 0, "retriever_actors": "one", "ask_deadline_s": 60.0,
                    "engine_factory": f"{FAKES}:make_model_engine", "sources_factory": f"{FAKES}:make_sources"}})
    with LocalService(settings) as svc, grpc.insecure_channel(svc.address) as ch:
        stub = eor_pb2_grpc.EorStub(ch)
        r = stub.Ask(eor_pb2.AskRequest(question="who painted the mona lisa"), timeout=120)
        assert [c.retriever for c in r.candidates] == PAIRED and not r.missing, r.missing
        assert r.answer == "lisa"
        small, strong = logged("small"), logged("strong")
        answers = [{p for p in prompts if "with one or few words" in p} for prompts in (small, strong)]
        assert len(answers[0] & answers[1]) == 1  # Wiki@10's prompt, read by both readers (no shared cache key)
        (se_answer,), (pk_answer,) = answers[0] - answers[1], answers[1] - answers[0]
        assert "A background document" in pk_answer and "A background document" not in se_answer
        assert [p for p in small if p.startswith("Generate a background document")] == []  # PK~1.5B: the 1.5B only
        assert len([p for p in strong if p.startswith("Generate a background document")]) == 1

        g = stub.Generate(eor_pb2.GenerateRequest(prompts=["Generate a background document x"]), timeout=60)
        assert g.model == "strong" and g.outputs[0].startswith("A background document")
        assert sorted(logged("starts")) == ["small", "strong"]  # one engine per model: Generate shares the 1.5B's
        names = set(serve.status().applications["eor"].deployments)
        assert {"Reader", "Reader_1.5B"} <= names and "Generator" not in names

        h = stub.Health(eor_pb2.HealthRequest(), timeout=60)
        assert h.status == eor_pb2.HealthReply.SERVING and (h.model, h.generator_model) == ("small", "strong")
        assert [(x.deployment, x.model) for x in h.readers] == [("Reader", "small"), ("Reader_1.5B", "strong")]
        assert all(x.prompts > 0 for x in h.readers)
        assert any(p.startswith("Reader_1.5B: ") for p in h.placement), list(h.placement)
        # Ray Serve labels each reader's series with its deployment
        want = 'deployment="Reader_1.5B"'
        text, deadline = "", time.time() + 60
        while time.time() < deadline and not any(want in line for line in text.splitlines()
                                                  if line.startswith("ray_eor_reader_prompts")):
            time.sleep(2)
            text = urllib.request.urlopen(f"http://{svc.metrics_address}/metrics", timeout=10).read().decode()
        assert any(want in line for line in text.splitlines() if line.startswith("ray_eor_reader_prompts")), \
            [line for line in text.splitlines() if "eor_reader_prompts" in line][:6]
