"""bench/fuzz.py's cases are refused by the wire checks, before any work (so the live fuzz
costs the reader nothing and never changes the voter)."""
from __future__ import annotations

import itertools

import pytest

from bench.fuzz import cases
from protos import eor_pb2
from serve.config import ServiceConfig
from serve.app.wire import InvalidArgument, lenient, parse_ask, parse_generate, parse_retrieve, parse_weights

POOL = ("Wiki@10", "SE@1", "ReFree")
LIMITS = ServiceConfig()
PARSE = {
    "Ask": (eor_pb2.AskRequest, lambda r: parse_ask(r, POOL, LIMITS, batch=False)),
    "AskBatch": (eor_pb2.AskBatchRequest, lambda r: parse_ask(r, POOL, LIMITS, batch=True)),
    "Generate": (eor_pb2.GenerateRequest, lambda r: parse_generate(r, LIMITS)),
    "Retrieve": (eor_pb2.RetrieveRequest, lambda r: parse_retrieve(r, ("Wiki", "SE"), LIMITS)),
    "SetVoterWeights": (eor_pb2.SetVoterWeightsRequest, lambda r: parse_weights(r, POOL, {"": "fake-reader"})),
}


def test_every_fuzz_case_is_refused_by_the_wire_checks():
    kinds = set()
    for case in itertools.islice(cases(seed=3, pool=POOL), 1400):
        if case.rpc not in PARSE:
            continue  # Health has no fields to be wrong; grpc.health.v1 is checked live
        msg_cls, parse = PARSE[case.rpc]
        with pytest.raises(InvalidArgument):
            parse(lenient(msg_cls)(case.data))
        kinds.add((case.rpc, case.kind))
    assert len(kinds) >= 30  # every kind of every rpc came up
