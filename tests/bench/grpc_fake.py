"""The fake service behind a real gRPC server (eor.v1 over loopback), so the bench's client and
CLI are tested on the wire. Tests only."""
from __future__ import annotations

from concurrent import futures

import grpc

from bench.robust.client import Doc
from protos import eor_pb2, eor_pb2_grpc
from tests.bench.fakes import POOL, FakeClient


class FakeServicer(eor_pb2_grpc.EorServicer):
    def __init__(self, fake: FakeClient):
        self.fake = fake
        self.bars: list[float | None] = []  # each AskBatch's min_confidence (None: unset)

    def AskBatch(self, request, context):  # noqa: N802
        docs = None
        if len(request.documents):
            docs = [[Doc(p.text, p.title, p.id, p.source) for p in d.passages] for d in request.documents]
        bar = request.min_confidence if request.HasField("min_confidence") else None
        self.bars.append(bar)
        results = self.fake.ask(list(request.questions), documents=docs, retrievers=tuple(request.retrievers),
                                min_confidence=bar or 0.0)
        reply = eor_pb2.AskBatchReply()
        for r in results:
            if not request.retrievers:  # as the service does: no retrievers named, the voter's cascade
                d = r.deployed
                reply.replies.add(question=r.question, answer=d.answer, reader_s=d.reader_s, latency_s=d.latency_s,
                                  voter=d.voter, ran=list(d.ran), stopped_at_stage=d.rounds, stages=2,
                                  prompt_tokens=d.tokens + 100, cached_prompt_tokens=100,
                                  candidates=[eor_pb2.Candidate(retriever=s, answer=r.answers[s]) for s in d.ran],
                                  confidence=d.confidence, abstained=d.abstained, guess=d.guess)
                continue
            reply.replies.add(question=r.question, answer=r.answer, reader_s=r.reader_s, latency_s=r.latency_s,
                              candidates=[eor_pb2.Candidate(retriever=s, answer=a) for s, a in r.answers.items()])
        return reply

    def Retrieve(self, request, context):  # noqa: N802
        reply = eor_pb2.RetrieveReply()
        for q, per in zip(request.questions, self.fake.retrieve(list(request.questions), request.k or 10)):
            res = reply.results.add(question=q)
            for src, hits in per.items():
                if request.sources and src not in request.sources:
                    continue
                res.sources.add(source=src, passages=[eor_pb2.Passage(id=h.id, title=h.title, text=h.text,
                                                                      source=h.source) for h in hits])
        return reply

    def Generate(self, request, context):  # noqa: N802
        return eor_pb2.GenerateReply(outputs=self.fake.generate(list(request.prompts)), model="fake")

    def Health(self, request, context):  # noqa: N802
        return eor_pb2.HealthReply(status=eor_pb2.HealthReply.SERVING, model="fake", retrievers=list(POOL))


class FakeServer:
    """`with FakeServer() as address:` a loopback eor.v1 server over a FakeClient."""

    def __init__(self, fake: FakeClient | None = None):
        self.fake = fake or FakeClient()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.servicer = FakeServicer(self.fake)
        eor_pb2_grpc.add_EorServicer_to_server(self.servicer, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    def __enter__(self) -> str:
        self.server.start()
        return f"127.0.0.1:{self.port}"

    def __exit__(self, *exc) -> None:
        self.server.stop(grace=None)
