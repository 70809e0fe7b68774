"""The bench's view of the live system: plain dataclasses over the eor.v1 gRPC client.

Every suite talks to the service only through `BenchClient` (tests pass a fake with the
same methods): `ask` (all candidates come back, so one pass scores EoR and every single
retriever), `retrieve` (sources alone, for Recall@k), `generate` (LLM rewrites and NLI
judgements by the service's reader).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

EOR = "EoR"  # the name the voted answer is reported under, beside the retrievers'


@dataclass(frozen=True)
class Doc:
    text: str
    title: str = ""
    id: str = ""
    source: str = ""

    def to_dict(self) -> dict:
        return {"id": self.id, "title": self.title, "text": self.text, "source": self.source}


@dataclass(frozen=True)
class AskResult:
    question: str
    answer: str  # the voted answer
    retriever: str  # the winner ("" when nobody answered)
    answers: Mapping[str, str]  # retriever spec -> its answer ("" when it failed)
    missing: tuple[str, ...] = ()
    latency_s: float = 0.0
    reader_s: float = 0.0

    def by_system(self) -> dict[str, str]:
        """EoR's answer and every retriever's, keyed by name."""
        return {EOR: self.answer, **self.answers}


@dataclass(frozen=True)
class Hit:
    id: str
    title: str
    text: str
    source: str
    score: float = 0.0


@dataclass
class BenchClient:
    """`BenchClient("127.0.0.1:50051")`: the live service (token from $EOR_SERVE_TOKEN)."""

    address: str
    token: str | None = None
    tls_ca: str | None = None
    timeout_s: float = 1800.0
    generate_seconds: float = field(default=0.0, init=False)  # reader time spent on Generate

    def __post_init__(self) -> None:
        from protos.client import EorClient

        self._c = EorClient(self.address, token=self.token, tls_ca=self.tls_ca, timeout_s=self.timeout_s)

    def ask(self, questions: Sequence[str], documents: Sequence[Sequence[Doc]] | None = None,
            retrievers: Sequence[str] = ()) -> list[AskResult]:
        docs = [[d.to_dict() for d in ds] for ds in documents] if documents is not None else ()
        reply = self._c.ask_batch(list(questions), retrievers=retrievers, documents=docs)
        return [AskResult(question=r.question, answer=r.answer, retriever=r.retriever,
                          answers={c.retriever: c.answer for c in r.candidates},
                          missing=tuple(r.missing), latency_s=r.latency_s, reader_s=r.reader_s)
                for r in reply.replies]

    def retrieve(self, questions: Sequence[str], k: int, sources: Sequence[str] = ()) -> list[dict[str, list[Hit]]]:
        reply = self._c.retrieve(list(questions), k=k, sources=sources)
        out = []
        for res in reply.results:
            per: dict[str, list[Hit]] = {}
            for sh in res.sources:
                if sh.error:
                    raise RuntimeError(f"source {sh.source} failed: {sh.error}")
                per[sh.source] = [Hit(p.id, p.title, p.text, p.source, p.score) for p in sh.passages]
            out.append(per)
        return out

    def generate(self, prompts: Sequence[str], max_tokens: int = 128, temperature: float = 0.0,
                 starts: Sequence[str] = ()) -> list[str]:
        t = time.perf_counter()
        outs = list(self._c.generate(list(prompts), max_tokens=max_tokens, temperature=temperature,
                                     starts=starts).outputs)
        self.generate_seconds += time.perf_counter() - t
        return outs

    def health(self) -> dict:
        h = self._c.health()
        return {"status": h.Status.Name(h.status), "model": h.model, "generator": h.generator_model,
                "retrievers": list(h.retrievers),
                "reader_prompts": h.reader_prompts, "reader_cache_hits": h.reader_cache_hits}

    def close(self) -> None:
        self._c.close()
