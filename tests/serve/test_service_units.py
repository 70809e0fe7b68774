"""Service pieces without a cluster: the reader batcher, the wire checks, the bearer token,
voter weights from user_config, settings and the generated stubs."""
from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path

import grpc
import pytest
import yaml

from protos import eor_pb2
from retrievers.reader import SamplingParams
from serve.config import ServiceConfig, actor_groups, actor_layout, config_from_dict, load_config
from serve.config_readers import reader_config
from serve.app.wire import BadRequest, InvalidArgument, lenient, parse_ask


def test_batcher_merges_concurrent_calls_per_params():
    from serve.app.batching import MergingBatcher

    calls = []

    def engine(texts, params, n_calls):
        calls.append((list(texts), params, n_calls, threading.current_thread().name))
        time.sleep(0.05)
        return [f"{t}!" for t in texts]

    async def main():
        b = MergingBatcher(engine, wait_s=0.01, max_prompts=100)
        p1, p2 = SamplingParams(max_tokens=8), SamplingParams(max_tokens=200)
        return await asyncio.gather(b.submit(["a", "b"], p1), b.submit(["c"], p1), b.submit(["d"], p2),
                                    b.submit(["e"], p1))

    outs = asyncio.run(main())
    assert outs == [["a!", "b!"], ["c!"], ["d!"], ["e!"]]
    assert sorted(len(c[0]) for c in calls) == [1, 4]  # one call per params: 4 prompts merged, 1 alone
    assert {c[3] for c in calls} == {calls[0][3]} and calls[0][3].startswith("engine")


def test_batcher_caps_batches_and_reports_engine_errors():
    from serve.app.batching import MergingBatcher

    sizes = []

    def engine(texts, params, n):
        sizes.append(len(texts))
        if "boom" in texts:
            raise RuntimeError("engine down")
        return texts

    async def main():
        b = MergingBatcher(engine, wait_s=0.01, max_prompts=3)
        p = SamplingParams()
        ok = await asyncio.gather(*[b.submit([str(i), str(i)], p) for i in range(3)])
        with pytest.raises(RuntimeError, match="engine down"):
            await b.submit(["boom"], p)
        return ok

    assert asyncio.run(main()) == [["0", "0"], ["1", "1"], ["2", "2"]]
    assert max(sizes) <= 3


def test_lenient_deserializer_turns_bad_bytes_into_bad_request():
    parse = lenient(eor_pb2.AskRequest)
    assert parse(eor_pb2.AskRequest(question="hi").SerializeToString()).question == "hi"
    bad = parse(b"\x0a\x02\xff\xfe")
    assert isinstance(bad, BadRequest) and "eor.v1.AskRequest" in bad.message


def test_parse_ask_limits():
    pool = ["Wiki@10", "ReFree"]
    limits = ServiceConfig(max_batch=2)
    spec = parse_ask(eor_pb2.AskRequest(question=" hi ", retrievers=["ReFree"]), pool, limits, batch=False,
                     max_question_chars=10)
    assert spec.questions == ("hi",) and spec.retrievers == ("ReFree",)
    for req, batch in [(eor_pb2.AskRequest(question="x" * 11), False),
                       (eor_pb2.AskBatchRequest(questions=["a", "b", "c"]), True),
                       (eor_pb2.AskBatchRequest(questions=[]), True),
                       (eor_pb2.AskRequest(question="a", top_k=1000), False),
                       (BadRequest("nope"), False)]:
        with pytest.raises(InvalidArgument):
            parse_ask(req, pool, limits, batch, max_question_chars=10)


def test_bearer_token_is_checked_on_every_rpc(monkeypatch):
    from serve.app.ingress import EorIngress

    monkeypatch.setenv("EOR_SERVE_TOKEN", "s3cret")
    cls = EorIngress.func_or_class
    ing = cls(config_from_dict({}), [], [], None, None)

    async def call(meta):
        return await ing.call("Health", eor_pb2.HealthRequest(), meta)

    for meta in [(), [("authorization", "Bearer nope")], [("authorization", "s3cret")]]:
        reply, code, details = asyncio.run(call(meta))
        assert code == grpc.StatusCode.UNAUTHENTICATED and reply is None
    reply, code, _ = asyncio.run(call([("authorization", "Bearer s3cret")]))
    assert code == grpc.StatusCode.OK and reply.status == eor_pb2.HealthReply.NOT_SERVING  # no reader in this unit test


def test_voter_weights_come_from_user_config_and_a_push_survives_a_restart(tmp_path, monkeypatch):
    from serve.app.deployments import Voter
    from serve.paths import pushed_voter_path
    from voter.question_vote import equal_weights

    monkeypatch.setenv("EOR_HOME", str(tmp_path))
    settings = config_from_dict({"voter": {"metrics": ["em"], "weights": "equal"}})
    voter = Voter.func_or_class(settings, None)
    assert voter.choice.source == "equal weights"
    plan = asyncio.run(voter.plan())  # an Ask begins with the equal-weights voter ...
    saved = equal_weights(list(settings.pool.specs), ["em"], "max")
    voter.reconfigure({"weights": saved.to_dict()})  # ... and a push lands while it runs
    assert voter.choice.source == "pushed" and voter.choice.saved.pooling == "max"
    assert plan.label.startswith("equal weights") and asyncio.run(voter.plan()).key != plan.key
    assert voter._recent[plan.key][0].source == "equal weights"  # the Ask's votes still use its own voter
    assert pushed_voter_path().exists()
    with pytest.raises(ValueError):
        voter.reconfigure({"weights": equal_weights(["ReFree"], ["em"]).to_dict()})  # another pool
    assert voter.choice.saved.pooling == "max"  # the refused push changed nothing
    # a restarted service (no user_config, no weights file) votes with the last pushed voter
    restarted = Voter.func_or_class(config_from_dict({"voter": {"metrics": ["em"]}}), None)
    assert restarted.choice.source == "pushed" and restarted.choice.saved.digest == voter.choice.saved.digest


def test_settings_groups_cover_the_pool_and_yaml_round_trips(tmp_path):
    s = load_config()
    per_spec = actor_groups(s, cpus=16)  # "auto" on a big node: one actor per spec
    assert sorted(x for g in per_spec for x in g) == sorted(s.pool.specs) and len(per_spec) == 23
    assert actor_groups(s, cpus=2) == [tuple(s.pool.specs)]  # "auto" on a small node: one actor
    assert actor_layout(s, cpus=2) == "one" and actor_layout(s, cpus=8) == "per-spec"
    small = config_from_dict({"pool": {"specs": ["ReFree", "Wiki@10", "Wiki@5"]},
                              "service": {"retriever_actors": "per-spec"}})
    assert actor_groups(small, cpus=2) == [("ReFree",), ("Wiki@10",), ("Wiki@5",)]
    grouped = config_from_dict({"pool": {"specs": ["ReFree", "Wiki@10", "Wiki@5"]},
                                "service": {"retriever_actors": [["Wiki@5", "ReFree"]]}})
    assert actor_groups(grouped, cpus=2) == [("ReFree", "Wiki@5"), ("Wiki@10",)]  # explicit groups win
    assert actor_layout(grouped) == "groups" and config_from_dict(grouped.to_dict()) == grouped
    with pytest.raises(ValueError, match="listed in two groups"):
        config_from_dict({"service": {"retriever_actors": [["Wiki@5"], ["Wiki@5", "ReFree"]]}})
    with pytest.raises(ValueError, match="unknown key service.groups"):  # one knob: the old second one is gone
        config_from_dict({"service": {"groups": [["Wiki@5"]]}})
    with pytest.raises(ValueError, match="retriever_actors must be one of"):
        config_from_dict({"service": {"retriever_actors": "many"}})
    assert config_from_dict(s.to_dict()) == s
    with pytest.raises(ValueError, match=r"unknown key service\.prot \(did you mean service\.port\?\)"):
        config_from_dict({"service": {"prot": 1}})
    with pytest.raises(ValueError, match=r"unknown key voter\.weight \(did you mean voter\.weights\?\)"):
        config_from_dict({"voter": {"weight": "equal"}})


def test_one_config_file_serves_every_command():
    """deploy/eor-cluster.yaml (reader, generator, voter and service sections) loads with the
    one loader `eor ask`, `eor fit`, `eor eval` and `eor serve` use."""
    c = load_config(DEPLOY / "eor-cluster.yaml", {"reader": {"model": None}})
    assert c.service.ask_deadline_s == 60 and c.voter.metrics == ("em", "bertscore")
    assert c.generator.model == reader_config(c, "1.5B").model  # Reader_1.5B's engine serves Generate


def test_generated_stubs_are_up_to_date():
    from protos.generate import main

    assert main(["--check"]) == 0


DEPLOY = Path(__file__).parents[2] / "deploy"


def _app_deployments() -> set[str]:
    names = {"Reader", "Reader_1.5B", "Source_Wiki", "Source_SE", "Voter", "EorIngress"}  # the default pool's two readers
    return names | {f"Retrievers_{i}" for i in range(len(actor_groups(load_config(), cpus=16)))}


def test_deploy_serve_yaml_is_a_valid_serve_config_that_builds_the_app():
    from ray.serve.schema import ServeDeploySchema

    from serve.app.application import app_builder

    doc = yaml.safe_load((DEPLOY / "serve.yaml").read_text())
    schema = ServeDeploySchema.model_validate(doc)
    [app] = schema.applications
    assert app.import_path == "serve.app.application:app_builder"
    from serve.app.grpc_service import PROXY_SERVICERS

    assert tuple(schema.grpc_options.grpc_servicer_functions) == PROXY_SERVICERS  # eor.v1.Eor and grpc.health.v1
    assert {d.name for d in app.deployments} <= _app_deployments()
    assert app_builder(app.args) is not None


def test_rayservice_manifest_has_the_fields_kuberay_documents():
    from ray.serve.schema import ServeDeploySchema

    doc = yaml.safe_load((DEPLOY / "rayservice.yaml").read_text())
    apps = doc["spec"]["serveConfigV2"]
    apps = yaml.safe_load(apps) if isinstance(apps, str) else apps
    voter = next(d for a in apps["applications"] for d in a["deployments"] if d["name"] == "Voter")
    assert voter["user_config"]["weights_file"] == ""  # the shipped voter: nothing only `eor fit` writes
    assert doc["apiVersion"] == "ray.io/v1" and doc["kind"] == "RayService"
    spec = doc["spec"]
    assert set(spec) <= {"serveConfigV2", "rayClusterConfig", "serviceUnhealthySecondThreshold",
                         "deploymentUnhealthySecondThreshold", "upgradeStrategy", "excludeHeadPodFromServeSvc"}
    serve_cfg = ServeDeploySchema.model_validate(yaml.safe_load(spec["serveConfigV2"]))
    assert {d.name for d in serve_cfg.applications[0].deployments} <= _app_deployments()
    cluster = spec["rayClusterConfig"]
    assert set(cluster) <= {"rayVersion", "enableInTreeAutoscaling", "autoscalerOptions", "headGroupSpec",
                            "workerGroupSpecs", "headServiceAnnotations", "suspend"}
    head = cluster["headGroupSpec"]
    assert {"rayStartParams", "template"} <= set(head)
    assert head["template"]["spec"]["containers"][0]["image"]
    for g in cluster["workerGroupSpecs"]:
        assert {"groupName", "replicas", "minReplicas", "maxReplicas", "rayStartParams", "template"} <= set(g)
        assert g["minReplicas"] <= g["replicas"] <= g["maxReplicas"]
    token_envs = [e for c in head["template"]["spec"]["containers"] for e in c.get("env", [])
                  if e["name"] == "EOR_SERVE_TOKEN"]
    assert token_envs and "valueFrom" in token_envs[0]  # from a Secret, never inline


def test_prometheus_and_grafana_cover_the_metrics():
    import json

    from serve.app.metrics import METRIC_KINDS

    prom = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    assert prom["scrape_configs"] and all("job_name" in j for j in prom["scrape_configs"])
    dash = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    suffixes = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
    exported = {f"ray_{name}{sfx}" for name, kind in METRIC_KINDS.items() for sfx in suffixes[kind]}
    named = set(re.findall(r"\bray_eor_\w+", exprs))
    assert named <= exported, f"the dashboard names series the service does not export: {sorted(named - exported)}"
    only_merging_batcher = {"eor_reader_merged_calls"}  # recorded only by the non-continuous engines' batcher
    for name in set(METRIC_KINDS) - only_merging_batcher:
        assert any(n.startswith(f"ray_{name}") for n in named), name


def test_every_eor_command_stops_on_sigterm_like_ctrl_c():
    """Every `eor` command turns SIGTERM (and SIGINT, ignored in a backgrounded process) into the
    KeyboardInterrupt that stops Ray and vLLM, instead of dying and orphaning them."""
    import os
    import signal

    from serve.cli.common import stop_on_sigterm as _stop_on_sigterm

    saved = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _stop_on_sigterm()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), sig)  # the handler runs before os.kill returns
    finally:
        signal.signal(signal.SIGTERM, saved[0])
        signal.signal(signal.SIGINT, saved[1])


def test_a_sigterm_during_any_command_ends_it_like_ctrl_c(monkeypatch, capsys):
    """`eor run` killed with SIGTERM: exit 130 with the one line that says the run log keeps
    what finished (the engine is closed on the way out), not a silent death."""
    import argparse
    import os
    import signal

    import serve.cli as cli

    def killed(args):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not interrupt the command")

    class Parser:
        def parse_args(self, argv):
            return argparse.Namespace(func=killed)

    monkeypatch.setattr(cli, "build_parser", lambda: Parser())
    saved = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        assert cli.main(["run"]) == 130
    finally:
        signal.signal(signal.SIGTERM, saved[0])
        signal.signal(signal.SIGINT, saved[1])
    err = capsys.readouterr().err
    assert "interrupted" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("command, action, says", [
    ("run", None, "finished questions are kept in the run log"),
    ("index", "build", "embedded shards are kept: run the same command again"),
    ("index", "add", "the index serves its last whole generation"),
])
def test_an_interrupted_command_says_what_it_kept(monkeypatch, capsys, command, action, says):
    import argparse

    import serve.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt

    class Parser:
        def parse_args(self, argv):
            return argparse.Namespace(func=interrupted, command=command,
                                      **({"action": action} if action else {}))

    monkeypatch.setattr(cli, "build_parser", lambda: Parser())
    assert cli.main([command]) == 130
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1


def test_health_names_the_retriever_actors_and_sources_that_do_not_answer():
    """A dead or hung part is listed (by spec or source name) and the status says degraded, not
    NOT_SERVING: Asks still answer without it."""
    from serve.app.ingress import EorIngress

    class Call:
        def __init__(self, how):
            self.how, self.cancelled = how, False

        def cancel(self):
            self.cancelled = True

        def __await__(self):
            if self.how == "dead":
                raise RuntimeError("actor died")
            if self.how == "hung":
                yield from asyncio.sleep(3600).__await__()
            return (yield from asyncio.sleep(0, "pong").__await__())

    class Handle:
        def __init__(self, how, value=None):
            self.how, self.value = how, value

        @property
        def ping(self):
            return self

        @property
        def weights_source(self):
            return self

        @property
        def stats(self):
            return self

        def remote(self, *args):
            return Call(self.how) if self.value is None else _Value(self.value)

    class _Value:
        def __init__(self, v):
            self.v = v

        def __await__(self):
            return (yield from asyncio.sleep(0, self.v).__await__())

    stats = {"model": "m", "prompts": 0, "cache_hits": 0, "engine_calls": 0, "engine_prompts": 0, "mean_batch": 0.0,
             "prompt_tokens": 0, "generated_tokens": 0}
    ing = EorIngress.func_or_class(config_from_dict({}), [Handle("ok"), Handle("dead"), Handle("hung")],
                                   [["SE@1"], ["PK", "ReFree"], ["Wiki@10"]], Handle("ok", "voter v1"),
                                   Handle("ok", stats), sources={"SE": Handle("ok"), "Wiki": Handle("dead")})

    async def health():
        return await ing._health(eor_pb2.HealthRequest())
    reply = asyncio.run(health())
    assert reply.status == eor_pb2.HealthReply.SERVING and list(reply.unavailable) == ["PK", "ReFree", "Wiki@10", "Wiki"]
    assert reply.detail == "degraded: not answering: PK, ReFree, Wiki@10, Wiki" and reply.voter == "voter v1"



@pytest.mark.parametrize("request_, message", [
    (dict(prompts=["a", "b"], starts=["x"]), "starts has 1 entries for 2 prompts"),
    (dict(prompts=["a"], starts=["x"], raw=True), "starts needs raw = false"),
    (dict(prompts=["a"], starts=["x" * 100_000]), "starts[0] too long"),
])
def test_generate_starts_are_checked(request_, message):
    from serve.app.wire import InvalidArgument, parse_generate

    with pytest.raises(InvalidArgument, match=re.escape(message)):
        parse_generate(eor_pb2.GenerateRequest(**request_), config_from_dict({}).service)


def test_one_question_limit_for_the_pool_and_the_service():
    """pool.max_question_chars is the one limit: raised, a long question passes the service's
    request check and the core's (before, the core's fixed 2000 failed every retriever)."""
    from retrievers.pool import PoolConfig, check_question

    long_q = "why " * 625  # 2,500 characters
    cfg = config_from_dict({"pool": {"max_question_chars": 3000}})
    assert cfg.pool.max_question_chars == 3000
    spec = parse_ask(eor_pb2.AskRequest(question=long_q), ["ReFree"], cfg.service, batch=False,
                     max_question_chars=cfg.pool.max_question_chars)
    assert check_question(spec.questions[0], PoolConfig(max_question_chars=3000).max_question_chars)
    with pytest.raises(InvalidArgument, match="too long: 2499 characters"):
        parse_ask(eor_pb2.AskRequest(question=long_q), ["ReFree"], cfg.service, batch=False)
