"""The HTTP front as `eor serve` opens it: Ray Serve's HTTP proxy on the configured port, with the
gRPC front's TLS, beside both gRPC fronts (the ingress, now also an ASGI ingress, still answers
them). The service runs a fake reader and fake sources (no model); the port and TLS options are
checked without Ray."""
from __future__ import annotations

import json
import socket
import ssl

import pytest

from serve.config import config_from_dict
from tests.serve import http_hostile

FAKES = "tests.serve.service_fakes"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_http_proxy_gets_the_fronts_host_port_and_tls_and_none_when_off():
    from serve.app.application import http_options

    svc = config_from_dict({"service": {"host": "127.0.0.1", "http_port": _free_port(), "tls_cert": "c.pem",
                                        "tls_key": "k.pem"}}).service
    assert http_options(svc) == {"host": "127.0.0.1", "port": svc.http_port, "ssl_certfile": "c.pem",
                                 "ssl_keyfile": "k.pem"}
    off = config_from_dict({"service": {"http_port": 0, "ray_grpc_port": 9000}}).service
    assert http_options(off) == {"host": "127.0.0.1", "port": 0}  # Ray's gRPC proxy alone: no HTTP port opened
    assert config_from_dict({}).service.http_port == 8000


def test_a_port_in_use_is_said_at_start_not_left_to_rays_retries():
    from serve.app.application import check_port_free

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        with pytest.raises(OSError, match=r"cannot open the HTTP front on 127\.0\.0\.1:\d+ .*--no-http"):
            check_port_free("127.0.0.1", held.getsockname()[1])


def test_eor_serve_takes_http_port_and_no_http():
    from serve.cli import build_parser

    args = build_parser().parse_args(["serve", "--http-port", "8100"])
    assert (args.http_port, args.no_http) == (8100, False)
    assert build_parser().parse_args(["serve", "--no-http"]).no_http


@pytest.mark.slow
def test_https_json_and_events_beside_both_grpc_fronts(tmp_path, monkeypatch):
    import grpc
    import httpx

    from protos import eor_pb2, eor_pb2_grpc
    from protos.client import EorClient
    from serve.app.application import LocalService
    from tests.serve.test_service_fake import _self_signed

    monkeypatch.setenv("EOR_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EOR_SERVE_TOKEN", http_hostile.TOKEN)
    cert, key = _self_signed(tmp_path)
    http_port, ray_grpc = _free_port(), _free_port()
    settings = config_from_dict({"generator": {"model": ""}, "pool": {"specs": ["Wiki@10", "SE@1", "SE@1@CP"]},
                                 "voter": {"weights": "equal", "metrics": ["em"]}, "service": {
        "port": 0, "http_port": http_port, "ray_grpc_port": ray_grpc, "metrics_port": 0, "tls_cert": cert,
        "tls_key": key, "engine_factory": f"{FAKES}:make_engine", "sources_factory": f"{FAKES}:make_sources",
        "ask_deadline_s": 60.0, "retriever_actors": "one"}})
    with LocalService(settings) as svc:
        assert svc.http_address == f"https://127.0.0.1:{http_port}"
        with httpx.Client(base_url=svc.http_address, verify=ssl.create_default_context(cafile=cert), timeout=60) as c:
            assert c.get("/readyz").json() == {"status": "SERVING"}
            r = c.post("/v1/ask", json={"question": "who painted the mona lisa"}, headers=http_hostile.GOOD)
            assert r.status_code == 200 and r.json()["answer"] == "lisa", r.text
            assert c.post("/v1/ask", json={"question": "who?"}).json()["status"] == "UNAUTHENTICATED"
            r = c.post("/v1/ask/stream", json={"question": "who painted the mona lisa"}, headers=http_hostile.GOOD)
            events = [line.split(": ", 1)[1] for line in r.text.splitlines() if line.startswith("event: ")]
            finals = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
            assert r.status_code == 200 and events[-1] == "final" and finals[-1]["final"] is True, r.text[:300]
            assert set(events[:-1]) <= {"preview", "round"}
            assert c.get("/").text.startswith("<!doctype html>")
        with pytest.raises(httpx.HTTPError):  # plaintext to the TLS port
            httpx.get(f"http://127.0.0.1:{http_port}/readyz", timeout=10)
        with EorClient(svc.address, token=http_hostile.TOKEN, tls_ca=cert) as g:  # the gRPC front, unchanged
            assert g.ask("who painted the mona lisa").answer == "lisa"
        with grpc.insecure_channel(f"127.0.0.1:{ray_grpc}") as ch:  # Ray's gRPC proxy reaches the ASGI ingress's rpcs
            reply = eor_pb2_grpc.EorStub(ch).Ask(eor_pb2.AskRequest(question="who painted the mona lisa"), timeout=60,
                                                 metadata=(("authorization", f"Bearer {http_hostile.TOKEN}"),))
            assert reply.answer == "lisa"
