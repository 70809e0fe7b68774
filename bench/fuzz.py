"""Malformed requests over every rpc of the live service: none may end INTERNAL or UNKNOWN.

    python -m bench.fuzz --server 127.0.0.1:50051 -n 10000 -c 16 --out var/bench/fuzz.json

Each request is bytes on the wire, built from a seeded generator so a failure replays
(`--seed`, and the case's index in the report). Every case is invalid by construction in a
field the service checks before any work (an empty or oversized question, an unknown or
malformed retriever spec, a NaN or negative deadline, too many documents, an oversized
document, too many prompts, a bad temperature, a voter JSON that is no voter, invalid
UTF-8, a truncated message, a wrong wire type), so the run costs the reader nothing and
never changes the live voter. Health and grpc.health.v1 get garbage too (Health may answer
OK: it has no fields to be wrong; any other rpc answering OK took a malformed request). After
the run Health must still say SERVING.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

SERVICE = "/eor.v1.Eor/"
BAD_CODES = ("INTERNAL", "UNKNOWN")
#: the service's default input limits (serve/config.py: ServiceConfig), exceeded by the cases
LIMITS = {"question": 2000, "batch": 64, "prompts": 64, "prompt": 20000, "max_tokens": 512,
          "documents": 50, "document": 20000, "top_k": 100, "deadline": 3600.0}


@dataclass(frozen=True)
class Case:
    rpc: str  # method name on eor.v1.Eor, or "grpc.health.v1.Health/Check"
    data: bytes
    kind: str  # what makes it malformed

    @property
    def path(self) -> str:
        return "/" + self.rpc if "/" in self.rpc else SERVICE + self.rpc


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _bad_utf8(rng: random.Random, field: int = 1) -> bytes:
    payload = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))) + b"\xff"
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _truncated(msg: bytes) -> bytes:
    """A message whose last length-delimited field claims more bytes than follow."""
    return msg[:-1] if msg else b"\x0a\x05ab"


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(("who", "what", "when", "wrote", "the", "first", "river", "king", "film"))
                    for _ in range(n))


def cases(seed: int = 0, pool: tuple[str, ...] = ("Wiki@10", "SE@1")) -> Iterator[Case]:
    """An endless, seeded stream of malformed requests, cycling over every rpc."""
    from protos import eor_pb2 as pb

    rng = random.Random(seed)
    q = lambda: _words(rng, rng.randrange(3, 9))  # noqa: E731 (a valid question: another field is bad)
    bad_specs = ("", "Nope@3", "Wiki@", "@10", "Wiki@-1", "Wiki@10@CP@CP", "SE@RR", "Wiki@10&", "ReFree@3",
                 "x" * 300, "Wiki@10\x00", "wiki@10", "SE@1 ", "Wiki@999999999999")  # none in the pool
    ask: list[tuple[str, Callable[[], bytes]]] = [
        ("empty question", lambda: pb.AskRequest(question=rng.choice(["", " ", "\n\t ", "\u200b" * 0])).SerializeToString()),
        ("oversized question", lambda: pb.AskRequest(question="a" * (LIMITS["question"] + rng.randrange(1, 10**6))).SerializeToString()),
        ("unknown retriever", lambda: pb.AskRequest(question=q(), retrievers=[rng.choice(bad_specs)]).SerializeToString()),
        ("bad deadline", lambda: pb.AskRequest(question=q(), deadline_s=rng.choice(
            [math.nan, -1.0, -math.inf, math.inf, LIMITS["deadline"] * 10])).SerializeToString()),
        ("top_k too large", lambda: pb.AskRequest(question=q(), top_k=LIMITS["top_k"] + rng.randrange(1, 2**31)).SerializeToString()),
        ("too many documents", lambda: pb.AskRequest(question=q(), documents=[
            pb.Passage(text="x") for _ in range(LIMITS["documents"] + 1)]).SerializeToString()),
        ("oversized document", lambda: pb.AskRequest(question=q(), documents=[
            pb.Passage(text="y" * (LIMITS["document"] + 1))]).SerializeToString()),
        ("document without text", lambda: pb.AskRequest(question=q(), documents=[pb.Passage(title="t")]).SerializeToString()),
        ("invalid utf-8", lambda: _bad_utf8(rng, 1)),
        ("truncated", lambda: _truncated(pb.AskRequest(question=q()).SerializeToString())),
        ("wrong wire type", lambda: _varint(1 << 3 | 0) + _varint(rng.randrange(2**20))),
    ]
    batch: list[tuple[str, Callable[[], bytes]]] = [
        ("empty batch", lambda: pb.AskBatchRequest().SerializeToString()),
        ("batch too large", lambda: pb.AskBatchRequest(questions=[q() for _ in range(LIMITS["batch"] + 1)]).SerializeToString()),
        ("one empty question", lambda: pb.AskBatchRequest(questions=[q(), "", q()]).SerializeToString()),
        ("documents count mismatch", lambda: pb.AskBatchRequest(questions=[q(), q()], documents=[
            pb.Documents(passages=[pb.Passage(text="z")])]).SerializeToString()),
        ("unknown retriever", lambda: pb.AskBatchRequest(questions=[q()], retrievers=[pool[0], rng.choice(bad_specs)]).SerializeToString()),
        ("bad deadline", lambda: pb.AskBatchRequest(questions=[q()], deadline_s=math.nan).SerializeToString()),
        ("invalid utf-8", lambda: _bad_utf8(rng, 1)),
        ("truncated", lambda: _truncated(pb.AskBatchRequest(questions=[q()]).SerializeToString())),
    ]
    gen: list[tuple[str, Callable[[], bytes]]] = [
        ("no prompts", lambda: pb.GenerateRequest(max_tokens=8).SerializeToString()),
        ("too many prompts", lambda: pb.GenerateRequest(prompts=["p"] * (LIMITS["prompts"] + 1)).SerializeToString()),
        ("empty prompt", lambda: pb.GenerateRequest(prompts=["ok", ""]).SerializeToString()),
        ("oversized prompt", lambda: pb.GenerateRequest(prompts=["p" * (LIMITS["prompt"] + 1)]).SerializeToString()),
        ("max_tokens too large", lambda: pb.GenerateRequest(prompts=["p"], max_tokens=LIMITS["max_tokens"] + rng.randrange(1, 2**31)).SerializeToString()),
        ("bad temperature", lambda: pb.GenerateRequest(prompts=["p"], temperature=rng.choice(
            [math.nan, -0.5, 3.0, math.inf])).SerializeToString()),
        ("invalid utf-8", lambda: _bad_utf8(rng, 1)),
        ("truncated", lambda: _truncated(pb.GenerateRequest(prompts=["hello"]).SerializeToString())),
    ]
    retrieve: list[tuple[str, Callable[[], bytes]]] = [
        ("no questions", lambda: pb.RetrieveRequest(k=3).SerializeToString()),
        ("unknown source", lambda: pb.RetrieveRequest(questions=[q()], sources=[rng.choice(["Bing", "", "wiki", "SE "])]).SerializeToString()),
        ("k too large", lambda: pb.RetrieveRequest(questions=[q()], k=LIMITS["top_k"] + rng.randrange(1, 2**31)).SerializeToString()),
        ("batch too large", lambda: pb.RetrieveRequest(questions=[q()] * (LIMITS["batch"] + 1)).SerializeToString()),
        ("invalid utf-8", lambda: _bad_utf8(rng, 1)),
    ]
    not_voters = ("", "[]", "null", "1", "\"w\"", "{", "{}", "{\"weights\": 1}", "{\"format\": \"eor-voter/2\"}",
                  "{\"pool\": [\"Wiki@10\"], \"metrics\": [\"em\"]}", "NaN", "[1, 2, 3]", "true",
                  "{\"format\": \"eor-voter/9\", \"pool\": []}")
    weights: list[tuple[str, Callable[[], bytes]]] = [
        ("not a voter", lambda: pb.SetVoterWeightsRequest(weights_json=rng.choice(not_voters)).SerializeToString()),
        ("random json", lambda: pb.SetVoterWeightsRequest(weights_json=json.dumps(
            {rng.choice(["pool", "weights", "kept", "cascade", "x"]): rng.choice([None, 1, "a", [], {}, [1.5]])
             for _ in range(rng.randrange(1, 4))})).SerializeToString()),
        ("oversized", lambda: pb.SetVoterWeightsRequest(weights_json="{" + " " * (2 * 10**6)).SerializeToString()),
        ("invalid utf-8", lambda: _bad_utf8(rng, 1)),
        ("random bytes", lambda: bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))) + b"\x0a\xff"),
    ]
    health: list[tuple[str, Callable[[], bytes]]] = [
        ("random bytes", lambda: bytes(rng.randrange(256) for _ in range(rng.randrange(0, 64)))),
    ]
    probe: list[tuple[str, Callable[[], bytes]]] = [
        ("unknown service", lambda: b"\x0a" + _varint(7) + b"nothing"),
        ("invalid utf-8", lambda: _bad_utf8(rng, 1)),
    ]
    table = [("Ask", ask), ("AskBatch", batch), ("Generate", gen), ("Retrieve", retrieve),
             ("SetVoterWeights", weights), ("Health", health), ("grpc.health.v1.Health/Check", probe)]
    while True:
        for rpc, kinds in table:
            kind, make = rng.choice(kinds)
            yield Case(rpc, make(), kind)


def run(address: str, n: int, concurrency: int = 16, seed: int = 0, timeout_s: float = 30.0,
        token: str | None = None) -> dict:
    """Send `n` malformed requests; the count of every (rpc, kind, status) and the failures."""
    import grpc

    from protos.client import EorClient

    ident = lambda b: b  # noqa: E731 (bytes on the wire as they are)
    metadata = (("authorization", f"Bearer {token}"),) if token else None
    channel = grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 64 * 2**20),
                                                      ("grpc.max_receive_message_length", 64 * 2**20)])
    stubs: dict[str, Callable] = {}
    counts: Counter = Counter()
    bad: list[dict] = []
    lock = threading.Lock()

    def send(i_case: tuple[int, Case]) -> None:
        i, case = i_case
        with lock:
            stub = stubs.get(case.path) or stubs.setdefault(
                case.path, channel.unary_unary(case.path, request_serializer=ident, response_deserializer=ident))
        try:
            stub(case.data, timeout=timeout_s, metadata=metadata)
            code, detail = "OK", ""
        except grpc.RpcError as exc:
            code, detail = exc.code().name, exc.details() or ""
        with lock:
            counts[(case.rpc, case.kind, code)] += 1
            accepted = code == "OK" and case.rpc != "Health"  # a malformed request must be refused
            if code in BAD_CODES or accepted or "Traceback" in detail or "\x1b[" in detail or "\n" in detail:
                bad.append({"i": i, "rpc": case.rpc, "kind": case.kind, "code": code, "detail": detail[:300]})

    stream = cases(seed)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(send, ((i, next(stream)) for i in range(n))))
    seconds = time.perf_counter() - t0
    channel.close()
    with EorClient(address, token=token) as client:
        health = client.health()
    by_code = Counter()
    for (_, _, code), c in counts.items():
        by_code[code] += c
    return {"requests": n, "seed": seed, "concurrency": concurrency, "seconds": round(seconds, 1),
            "by_code": dict(by_code), "bad": bad[:50], "bad_count": len(bad),
            "by_rpc_kind": [{"rpc": r, "kind": k, "code": c, "n": v} for (r, k, c), v in sorted(counts.items())],
            "health_after": health.Status.Name(health.status)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True)
    ap.add_argument("-n", type=int, default=10000)
    ap.add_argument("-c", type=int, default=16, help="concurrency")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--token", default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    from bench.service_calls import check_loopback

    check_loopback(args.server)
    report = run(args.server, args.n, args.c, args.seed, token=args.token)
    text = json.dumps(report, indent=2)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "by_rpc_kind"}, indent=2))
    return 0 if report["bad_count"] == 0 and report["health_after"] == "SERVING" else 1


if __name__ == "__main__":
    raise SystemExit(main())
