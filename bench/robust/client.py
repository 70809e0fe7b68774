"""The bench's view of the live system: plain dataclasses over the eor.v1 gRPC client.

Every suite talks to the service only through `BenchClient` (tests pass a fake with the
same methods): `ask` (the deployed path, then all candidates: one pass scores production's
answer, EoR and every single retriever), `retrieve` (sources alone, for Recall@k), `generate` (LLM rewrites and NLI
judgements by the service's reader).

The deployed path is asked once per question, at the run's `min_confidence` (0: always answer):
its reply carries P(right) and, below the bar, the abstention and the best guess, so one Ask
gives both deployed rows: the answer production gives at 0 (`Deployed.voted`) and the one it
gives at the bar (`bench.robust.abstention`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

EOR = "EoR"  # the vote over every retriever the suite names (EoR-16 with the whole pool)
DEPLOYED = "deployed"  # what production answers: an Ask naming no retrievers (the live voter's cascade)
ENSEMBLES = (DEPLOYED, EOR)  # the rows that are not one retriever
_ABSTAINING = f"{DEPLOYED}, abstains below "


def abstaining(min_confidence: float) -> str:
    """The deployed path's second row: the same replies, an answer withheld below P(right) `min_confidence`."""
    return f"{_ABSTAINING}{min_confidence:g}"


def is_ensemble(system: str) -> bool:
    """A row that is not one retriever: EoR, the deployed path, and the deployed path abstaining."""
    return system in ENSEMBLES or system.startswith(_ABSTAINING)


@dataclass(frozen=True)
class Doc:
    text: str
    title: str = ""
    id: str = ""
    source: str = ""

    def to_dict(self) -> dict:
        return {"id": self.id, "title": self.title, "text": self.text, "source": self.source}


@dataclass(frozen=True)
class Deployed:
    """The production path's answer to one question and what it cost: the retrievers the
    live voter's cascade ran, its rounds, and the reader tokens a cold run computes. Asked at a
    `min_confidence` above its P(right), the service abstains: `answer` is empty and the voted
    answer is the `guess` (as on the wire)."""

    answer: str
    voter: str = ""
    ran: tuple[str, ...] = ()
    rounds: int = 0  # the stage the cascade stopped after
    tokens: int = 0  # prompt - prefix-cache hits + generated
    latency_s: float = 0.0
    reader_s: float = 0.0
    confidence: float | None = None  # the reply's P(right) (None: the live voter gives none)
    abstained: bool = False  # below `min_confidence`: "not sure"
    guess: str = ""  # the voted answer when it abstained
    min_confidence: float = 0.0  # the bar it was asked with

    @property
    def voted(self) -> str:
        """The voted answer, shown or withheld: what the path answers at min_confidence 0."""
        return self.guess if self.abstained else self.answer

    def to_dict(self) -> dict:
        return {"answer": self.answer, "voter": self.voter, "ran": list(self.ran), "rounds": self.rounds,
                "tokens": self.tokens, "latency_s": self.latency_s, "reader_s": self.reader_s,
                "confidence": self.confidence, "abstained": self.abstained, "guess": self.guess,
                "min_confidence": self.min_confidence}


@dataclass(frozen=True)
class AskResult:
    question: str
    answer: str  # the voted answer over the named retrievers
    retriever: str  # the winner ("" when nobody answered)
    answers: Mapping[str, str]  # retriever spec -> its answer ("" when it failed)
    missing: tuple[str, ...] = ()
    latency_s: float = 0.0
    reader_s: float = 0.0
    deployed: Deployed | None = None  # the same question asked as production asks it

    def by_system(self) -> dict[str, str]:
        """The deployed answer (when asked; withheld or not), EoR's and every retriever's, keyed by name."""
        head = {DEPLOYED: self.deployed.voted} if self.deployed is not None else {}
        return {**head, EOR: self.answer, **self.answers}


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
            retrievers: Sequence[str] = (), deployed: bool = True, min_confidence: float = 0.0) -> list[AskResult]:
        """The named retrievers' answers and their vote; with `deployed`, first the same
        questions as production asks them (no retrievers named: the live voter's cascade,
        timed cold), at `min_confidence`. The named Ask then finds the cascade's reader outputs
        in the service's reader cache, so the pool is not paid twice for the retrievers both
        ran. Both bars are sent, 0 included, so a service default does not move the rows."""
        docs = [[d.to_dict() for d in ds] for ds in documents] if documents is not None else ()
        prod = (self._c.ask_batch(list(questions), documents=docs, min_confidence=min_confidence).replies
                if deployed and retrievers else None)
        alone = deployed and not retrievers  # the one Ask is the deployed path's
        reply = self._c.ask_batch(list(questions), retrievers=retrievers, documents=docs,
                                  min_confidence=min_confidence if alone else 0.0)
        out = []
        for n, r in enumerate(reply.replies):
            d = _deployed(prod[n], min_confidence) if prod is not None else (_deployed(r, min_confidence) if alone else None)
            out.append(AskResult(question=r.question, answer=r.answer or r.guess, retriever=r.retriever,
                                 answers={c.retriever: c.answer for c in r.candidates},
                                 missing=tuple(r.missing), latency_s=r.latency_s, reader_s=r.reader_s,
                                 deployed=d))
        return out

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


def _deployed(r, min_confidence: float) -> Deployed:
    return Deployed(answer=r.answer, voter=r.voter, ran=tuple(r.ran), rounds=int(r.stopped_at_stage),
                    tokens=int(r.prompt_tokens - r.cached_prompt_tokens + r.generated_tokens),
                    latency_s=r.latency_s, reader_s=r.reader_s,
                    confidence=r.confidence if r.HasField("confidence") else None,
                    abstained=r.abstained, guess=r.guess, min_confidence=min_confidence)
