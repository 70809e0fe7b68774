"""The gRPC client of eor.v1.Eor: `eor ask --server`, `eor fit --push` and the bench.

    with EorClient("127.0.0.1:50051", token=..., tls_ca=...) as c:
        reply = c.ask("who painted the mona lisa")

It lives beside the wire format (not in `serve/`) because the bench is a pure client: it
imports `protos` and never the server's packages.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import grpc

from protos import eor_pb2, eor_pb2_grpc


def parse_address(text: str) -> str:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return text


def _deadline(deadline_s: float) -> dict:
    """The request's `deadline_s` field: set only when given (0: unset, the server's default)."""
    return {"deadline_s": deadline_s} if deadline_s else {}


class EorClient:
    def __init__(self, address: str, token: str | None = None, tls_ca: str | None = None,
                 timeout_s: float = 600.0, max_message_mb: int = 64):
        self.address = parse_address(address)
        self.timeout_s = timeout_s
        token = token if token is not None else os.environ.get("EOR_SERVE_TOKEN", "")
        self.metadata = (("authorization", f"Bearer {token}"),) if token else ()
        opts = [("grpc.max_receive_message_length", max_message_mb * 2**20),
                ("grpc.max_send_message_length", max_message_mb * 2**20)]
        if tls_ca:
            creds = grpc.ssl_channel_credentials(Path(tls_ca).read_bytes())
            self.channel = grpc.secure_channel(address, creds, options=opts)
        else:
            self.channel = grpc.insecure_channel(address, options=opts)
        self.stub = eor_pb2_grpc.EorStub(self.channel)

    def ask(self, question: str, retrievers: Sequence[str] = (), top_k: int = 0,
            deadline_s: float = 0.0, documents: Sequence[Mapping] = (),
            min_confidence: float | None = None) -> eor_pb2.AskReply:
        """`documents`: grounding passages ({"title", "text"[, "id", "source"]}) read instead
        of searching Wiki and SE. `min_confidence`: abstain below this P(right) (None: the
        server's default)."""
        req = eor_pb2.AskRequest(question=question, retrievers=list(retrievers), top_k=top_k,
                                 documents=[to_passage(d) for d in documents], min_confidence=min_confidence,
                                 **_deadline(deadline_s))
        return self.stub.Ask(req, timeout=self.timeout_s, metadata=self.metadata)

    def ask_stream(self, question: str, retrievers: Sequence[str] = (), top_k: int = 0,
                   deadline_s: float = 0.0, min_confidence: float | None = None) -> Iterator[eor_pb2.AskReply]:
        """AskStream: a provisional reply after each round that left the question open
        (`final` false), then the final one. Closing the iterator cancels the Ask."""
        req = eor_pb2.AskRequest(question=question, retrievers=list(retrievers), top_k=top_k,
                                 min_confidence=min_confidence, **_deadline(deadline_s))
        return self.stub.AskStream(req, timeout=self.timeout_s, metadata=self.metadata)

    def ask_batch(self, questions: Sequence[str], retrievers: Sequence[str] = (), top_k: int = 0,
                  deadline_s: float = 0.0, documents: Sequence[Sequence[Mapping]] = (),
                  min_confidence: float | None = None) -> eor_pb2.AskBatchReply:
        """`documents`: empty, or one list of passages per question (empty list: search)."""
        docs = [eor_pb2.Documents(passages=[to_passage(d) for d in ds]) for ds in documents]
        req = eor_pb2.AskBatchRequest(questions=list(questions), retrievers=list(retrievers), top_k=top_k,
                                      documents=docs, min_confidence=min_confidence, **_deadline(deadline_s))
        return self.stub.AskBatch(req, timeout=self.timeout_s, metadata=self.metadata)

    def retrieve(self, questions: Sequence[str], k: int = 0, sources: Sequence[str] = ()) -> eor_pb2.RetrieveReply:
        req = eor_pb2.RetrieveRequest(questions=list(questions), k=k, sources=list(sources))
        return self.stub.Retrieve(req, timeout=self.timeout_s, metadata=self.metadata)

    def set_voter_weights(self, weights_json: str) -> eor_pb2.SetVoterWeightsReply:
        req = eor_pb2.SetVoterWeightsRequest(weights_json=weights_json)
        return self.stub.SetVoterWeights(req, timeout=self.timeout_s, metadata=self.metadata)

    def generate(self, prompts: Sequence[str], max_tokens: int = 64, temperature: float = 0.0,
                 raw: bool = False, cue: str = "", stop: Sequence[str] = (),
                 starts: Sequence[str] = ()) -> eor_pb2.GenerateReply:
        req = eor_pb2.GenerateRequest(prompts=list(prompts), max_tokens=max_tokens, temperature=temperature,
                                      raw=raw, cue=cue, stop=list(stop), starts=list(starts))
        return self.stub.Generate(req, timeout=self.timeout_s, metadata=self.metadata)

    def health(self, timeout_s: float = 30.0) -> eor_pb2.HealthReply:
        return self.stub.Health(eor_pb2.HealthRequest(), timeout=timeout_s, metadata=self.metadata)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> "EorClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def to_passage(doc: Mapping) -> eor_pb2.Passage:
    return eor_pb2.Passage(id=str(doc.get("id", "")), title=str(doc.get("title", "")), text=str(doc["text"]),
                           source=str(doc.get("source", "")), score=float(doc.get("score", 0.0)))


def reply_to_dict(r: eor_pb2.AskReply) -> dict:
    """An AskReply as JSON-ready data, shaped like `eor ask --json`."""
    return {
        "question": r.question, "answer": r.answer, "retriever": r.retriever or None,
        "confidence": r.confidence if r.HasField("confidence") else None,
        "confidence_kind": r.confidence_kind or "none", "abstained": r.abstained, "guess": r.guess or None,
        "score": r.score if r.HasField("score") else None,
        "margin": r.margin if r.HasField("margin") else None, "final": r.final,
        "candidates": [{"retriever": c.retriever, "answer": c.answer,
                        "score": c.score if c.HasField("score") else None, "error": c.error or None,
                        "error_kind": c.error_kind or None,
                        "confidence": c.confidence if c.HasField("confidence") else None,
                        "token_logprobs": list(c.token_logprobs)}
                       for c in r.candidates],
        "passages": [{"id": p.id, "title": p.title, "source": p.source, "score": p.score} for p in r.passages],
        "document": r.document or None,
        "failed": list(r.missing),
        "latency_s": r.latency_s,
        "reader_s": r.reader_s,
        "voter": r.voter,
        "ran": list(r.ran),
        "stopped_at_stage": r.stopped_at_stage,
        "stages": r.stages,
        "under_load": r.under_load,  # stopped early under load (the lower bar)
        "degraded": r.degraded or None,  # a reader down: the voter's single-reader fallback answered
    }
