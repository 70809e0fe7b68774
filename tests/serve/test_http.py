"""The HTTP front (serve/app/http.py) over the ingress's own code path (EorIngress.call and
ask_stream, as both gRPC fronts use them) with stand-in handles, no Ray: the status table, the
stream's events in order, the token, the client's timeout, hostile input, the OpenAPI schema."""
from __future__ import annotations

import asyncio
import json

import grpc
import pytest
from google.protobuf import json_format
from starlette.testclient import TestClient

from protos import eor_pb2
from serve.app.errors import HTTP_STATUS, NotJson, TooLarge, http_error
from serve.app.http import build_http_app, events, shipped_files
from tests.serve import http_hostile
from tests.serve.test_ask_stream import decisions, first_vote_plan, group, voter
from tests.serve.test_reader_recovery import RayTaskError, _Handle, _ingress, _Remote
from voter.cascade import Cascade
from serve.app.deployments import VoterPlan
from voter.question_vote import Vote

STATS = {"model": "m", "prompts": 0, "cache_hits": 0, "engine_calls": 0, "engine_prompts": 0, "mean_batch": 0.0,
         "prompt_tokens": 0, "generated_tokens": 0, "cached_tokens": 0, "down": None, "restarts": 0}


def reader(down: str | None = None) -> _Handle:
    return _Handle(stats=lambda: {**STATS, "down": down}, model_id=lambda: "m")


def serving(plan: _Handle) -> _Handle:
    plan.weights_source = _Remote(lambda: "test voter")
    return plan


def client(ing) -> TestClient:
    return TestClient(build_http_app(ing))


def sse_events(text: str) -> list[tuple[str, dict]]:
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((lines["event"], json.loads(lines["data"])))
    return out


# ---- the status table --------------------------------------------------------------------------
def test_every_grpc_status_has_an_http_status_and_the_issues_ones_are_these():
    assert set(HTTP_STATUS) == set(grpc.StatusCode)
    S = grpc.StatusCode
    assert {c: HTTP_STATUS[c] for c in (S.INVALID_ARGUMENT, S.UNAUTHENTICATED, S.RESOURCE_EXHAUSTED, S.UNAVAILABLE,
                                        S.DEADLINE_EXCEEDED, S.INTERNAL)} == {
        S.INVALID_ARGUMENT: 400, S.UNAUTHENTICATED: 401, S.RESOURCE_EXHAUSTED: 429, S.UNAVAILABLE: 503,
        S.DEADLINE_EXCEEDED: 504, S.INTERNAL: 500}
    assert http_error(TooLarge("big")) == (413, S.RESOURCE_EXHAUSTED, "big")  # the caller must send less, not wait
    assert http_error(RayTaskError(TooLarge("big")))[0] == 413  # raised in another actor, the same
    assert http_error(NotJson("not json"))[:2] == (415, S.INVALID_ARGUMENT)
    assert http_error(RuntimeError("bad\nTraceback (most recent call last):")) == (500, S.INTERNAL, "RuntimeError: bad")


class Answers:
    """An ingress whose every call answers with `code` and a two-line detail."""

    def __init__(self, code: grpc.StatusCode):
        self.code = code

    async def call(self, method, request, metadata=(), transport=None):
        return None, self.code, "what went wrong\nsecond line"

    async def ask_stream(self, request, metadata=(), transport=None):
        yield None, self.code, "what went wrong\nsecond line"

    async def serving(self):
        return False, "down"


@pytest.mark.parametrize("code", [c for c in grpc.StatusCode if c != grpc.StatusCode.OK], ids=lambda c: c.name)
def test_each_status_goes_out_as_its_http_status_with_one_line_of_json(code):
    c = client(Answers(code))
    for path in ("/v1/ask", "/v1/ask/stream", "/v1/ask/batch"):
        r = c.post(path, json={"question": "who?"})
        assert r.status_code == HTTP_STATUS[code]
        assert r.text == json.dumps({"error": "what went wrong second line", "status": code.name}, separators=(",", ":"))


def test_a_reader_that_is_down_is_503_and_readiness_says_why():
    from serve.app.errors import ReaderUnavailable

    down = "reader engine down (EngineDeadError: boom); restarting"
    ing = _ingress(reader(down), _Handle(run=lambda *a: RayTaskError(ReaderUnavailable(down))),
                   serving(_Handle(plan=lambda: VoterPlan("k", Cascade.single_round(["ReFree"]), "equal weights"))))
    c = client(ing)
    r = c.post("/v1/ask", json={"question": "who?"})
    assert (r.status_code, r.json()) == (503, {"error": down, "status": "UNAVAILABLE"})
    assert (c.get("/readyz").status_code, c.get("/readyz").json()["error"]) == (503, down)
    h = c.get("/v1/health")
    assert h.status_code == 200 and h.json()["status"] == "NOT_SERVING" and h.json()["detail"] == down


# ---- the stream ----------------------------------------------------------------------------------
def test_the_stream_sends_the_preview_then_each_round_then_the_final_reply_as_askstream_does():
    handle = group(delay=lambda specs: 0.2 if any(s.endswith("@CP") for s in specs) else 0.01)
    ing = _ingress(_Handle(), handle, first_vote_plan((("SE@1", "SE@1@CP"), ("Wiki@10",))))
    r = client(ing).post("/v1/ask/stream", json={"question": "who?"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    got = sse_events(r.text)
    assert [kind for kind, _ in got] == ["preview", "round", "final"]
    replies = [json_format.ParseDict(data, eor_pb2.AskReply()) for _, data in got]  # the proto's own JSON mapping
    assert [x.stopped_at_stage for x in replies] == [0, 1, 2] and [x.final for x in replies] == [False, False, True]
    assert list(replies[0].ran) == ["SE@1"] and replies[-1].answer == "answer of SE@1"
    grpc_side = asyncio.run(_collect(_ingress(_Handle(), handle, first_vote_plan((("SE@1", "SE@1@CP"), ("Wiki@10",))))))
    assert [x.stopped_at_stage for x, _, _ in grpc_side] == [x.stopped_at_stage for x in replies]


async def _collect(ing):
    return [item async for item in ing.ask_stream(eor_pb2.AskRequest(question="who?"))]


def test_rounds_without_a_preview_come_as_rounds_and_a_settled_first_round_as_the_final_alone():
    r = client(_ingress(_Handle(), group(), voter(settle_at=3))).post("/v1/ask/stream", json={"question": "who?"})
    assert [kind for kind, _ in sse_events(r.text)] == ["round", "round", "final"]
    r = client(_ingress(_Handle(), group(), voter(settle_at=1))).post("/v1/ask/stream", json={"question": "who?"})
    assert [kind for kind, _ in sse_events(r.text)] == ["final"]


def test_an_error_before_the_first_reply_is_a_plain_status_and_a_later_one_the_streams_last_event():
    ing = _ingress(_Handle(), group(), voter(settle_at=3))
    r = client(ing).post("/v1/ask/stream", json={"question": " "})
    assert (r.status_code, r.json()["status"]) == (400, "INVALID_ARGUMENT")

    def decide(results, key, cascade, stage, deadline):
        if stage > 0:
            return RuntimeError("boom\nTraceback (most recent call last):")
        votes = [Vote(r.candidates[0].retriever, r.candidates[0].answer, 0.5, None, {}) for r in results]
        return decisions(votes, [0.0] * len(results), cascade, stage)
    plan = _Handle(plan=lambda: VoterPlan("k", Cascade((("SE@1",), ("Wiki@10",)), (1.0,)), "t"), decide=decide)
    r = client(_ingress(_Handle(), group(), plan)).post("/v1/ask/stream", json={"question": "who?"})
    got = sse_events(r.text)
    assert r.status_code == 200 and [kind for kind, _ in got] == ["round", "error"]
    assert got[-1][1] == {"error": "RuntimeError: boom", "status": "INTERNAL"}


def test_a_client_that_leaves_the_stream_cancels_the_ask():
    started, cancelled = [], []
    ing = _ingress(_Handle(), group(delay=0.2, started=started, cancelled=cancelled), voter(settle_at=3))

    async def scenario():
        replies = ing.ask_stream(eor_pb2.AskRequest(question="who?"))
        stream = events(await replies.__anext__(), replies)
        assert (await stream.__anext__()).startswith("event: round\ndata: {")
        await stream.aclose()  # what Starlette does when the client goes away
        await asyncio.sleep(0.3)
    asyncio.run(scenario())
    assert started == [["SE@1"], ["Wiki@10"]] and cancelled == [["Wiki@10"]]


def test_the_clients_timeout_header_bounds_the_ask_as_a_grpc_deadline_does():
    ing = _ingress(_Handle(), group(delay=0.3), voter(settle_at=3))
    r = client(ing).post("/v1/ask", json={"question": "who?"}, headers={"connect-timeout-ms": "1000"})
    assert r.status_code == 200 and r.json()["stopped_at_stage"] < 3  # 1 s less the reply's margin
    r = client(ing).post("/v1/ask", json={"question": "who?"}, headers={"connect-timeout-ms": "soon"})
    assert (r.status_code, r.json()["status"]) == (400, "INVALID_ARGUMENT")


# ---- the token ------------------------------------------------------------------------------------
def test_every_v1_route_checks_the_token_and_the_probes_and_page_need_none():
    ing = _ingress(reader(), group(), serving(voter(settle_at=1)))
    ing.token = http_hostile.TOKEN
    c = client(ing)
    calls = [("POST", "/v1/ask", {"question": "who?"}), ("POST", "/v1/ask/stream", {"question": "who?"}),
             ("POST", "/v1/ask/batch", {"questions": ["who?"]}), ("GET", "/v1/health", None), ("GET", "/v1/voter", None)]
    for method, path, body in calls:
        for auth in (None, "Bearer wrong", f"Basic {http_hostile.TOKEN}", f"Bearer {http_hostile.TOKEN}x"):
            r = c.request(method, path, json=body, headers={"authorization": auth} if auth else {})
            assert (r.status_code, r.json()) == (401, {"error": "missing or wrong bearer token",
                                                       "status": "UNAUTHENTICATED"}), (path, auth)
        r = c.request(method, path, json=body, headers=http_hostile.GOOD)
        assert r.status_code == 200, (path, r.text)
    bad = c.post("/v1/ask", content=b"{", headers={"content-type": "application/json"})
    assert bad.status_code == 401  # the token before the body: nothing is said about a request without it
    for path in ("/healthz", "/readyz", "/", "/web/app.js", "/openapi.json"):
        assert c.get(path).status_code == 200, path


# ---- hostile input ---------------------------------------------------------------------------------
def test_a_thousand_hostile_requests_get_no_500_and_one_line_each_and_the_service_serves_after():
    ing = _ingress(reader(), group(), serving(voter(settle_at=1)))
    ing.token = http_hostile.TOKEN
    c = client(ing)
    statuses: dict[int, int] = {}
    for method, path, kwargs in http_hostile.requests(1000):
        r = c.request(method, path, **kwargs)
        http_hostile.check(r)
        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
    assert {400, 401, 404, 405, 413, 415} <= set(statuses), statuses
    assert c.get("/readyz").json() == {"status": "SERVING"}
    assert c.get("/v1/health", headers=http_hostile.GOOD).json()["status"] == "SERVING"


def test_bodies_over_the_limit_are_413_said_or_chunked():
    c = client(_ingress(_Handle(), group(), voter(settle_at=1)))
    json_type = {"content-type": "application/json"}
    r = c.post("/v1/ask", content=b" " * (4 * 2**20 + 1), headers=json_type)
    assert (r.status_code, r.json()["status"]) == (413, "RESOURCE_EXHAUSTED")
    r = c.post("/v1/ask", content=iter([b" " * 2**20] * 5), headers=json_type)  # no Content-Length
    assert r.status_code == 413
    r = c.post("/v1/ask", content=b'{"question": "who?"}', headers={"content-type": "text/plain"})
    assert (r.status_code, r.json()["status"]) == (415, "INVALID_ARGUMENT")


def test_json_bodies_are_the_proto_messages_and_unknown_fields_are_refused():
    c = client(_ingress(_Handle(), group(), voter(settle_at=1)))
    ok = c.post("/v1/ask", json={"question": "who?", "retrievers": ["SE@1"], "minConfidence": 0.0})  # either name
    assert ok.status_code == 200 and ok.json()["ran"] == ["SE@1"] and ok.json()["final"] is True
    bad = c.post("/v1/ask", json={"question": "who?", "min_confidance": 0.5})
    assert bad.status_code == 400 and "min_confidance" in bad.json()["error"]
    wrong = c.post("/v1/ask", json={"question": 5})
    assert wrong.status_code == 400 and wrong.json()["error"].startswith("request is not a valid eor.v1.AskRequest")


# ---- the schema and what ships -------------------------------------------------------------------
def test_the_openapi_schema_is_the_protos_messages():
    doc = client(Answers(grpc.StatusCode.OK)).get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    assert set(schemas["AskRequest"]["properties"]) == {f.name for f in eor_pb2.AskRequest.DESCRIPTOR.fields}
    assert set(schemas["AskReply"]["properties"]) == {f.name for f in eor_pb2.AskReply.DESCRIPTOR.fields}
    assert schemas["AskReply"]["properties"]["candidates"] == {"type": "array",
                                                               "items": {"$ref": "#/components/schemas/Candidate"}}
    ask = doc["paths"]["/v1/ask"]["post"]
    assert ask["requestBody"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/AskRequest"}
    assert {"200", "400", "401", "413", "429", "503", "504"} <= set(ask["responses"])
    assert "text/event-stream" in doc["paths"]["/v1/ask/stream"]["post"]["responses"]["200"]["content"]
    refs = {v for v in json.dumps(doc).split('"') if v.startswith("#/components/schemas/")}
    assert {r.rsplit("/", 1)[1] for r in refs} <= set(schemas)  # no dangling reference


def test_the_voter_view_names_the_rounds_thresholds_and_the_files_that_ship(tmp_path):
    for name in ("img/reliability-abcdef123456-700.png", "img/reliability-ffff00000000-10.png",
                 "robustness/rare-abcd.md", "robustness/sure-abcd.md", "robustness/rare-ffff.md"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("x")
    assert shipped_files("abcdef123456", tmp_path) == {
        "reliability": ["/files/img/reliability-abcdef123456-700.png"],
        "reports": ["/files/robustness/rare-abcd.md", "/files/robustness/sure-abcd.md"], "plots": []}
    plan = _Handle(plan=lambda: VoterPlan("abcdef123456:shipped", Cascade((("SE@1",), ("SE@4", "PK")), (0.5,),
                                                                          preview=("Wiki@10",)), "fitted voter"))
    v = client(_ingress(_Handle(), group(), plan)).get("/v1/voter").json()
    assert (v["id"], v["rounds"], v["thresholds"], v["preview"]) == ("abcdef123456", [["SE@1"], ["SE@4", "PK"]],
                                                                     [0.5], ["Wiki@10"])
    assert set(v["files"]) == {"reliability", "reports", "plots"}
