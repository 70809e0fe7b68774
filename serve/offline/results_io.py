"""Pool results <-> JSON-ready dicts, shared by `eor ask --json` and the run log.

Passages are kept as references (id, title, source), not their text: the index holds the
text, and a run log of 16 retrievers x 10 passages per question would otherwise grow by
~100 KB a question. Generated documents (PK, @CP summaries) are kept whole -- they exist
nowhere else.
"""
from __future__ import annotations

from typing import Any

from retrievers.types import ERROR, TIMEOUT, Candidate, Context, Passage, QuestionResult, ReaderTokens


def passage_ref(p: Passage) -> dict[str, Any]:
    return {"id": p.pid, "title": p.title, "source": p.source, "score": round(p.score, 5)}


def candidate_to_dict(c: Candidate, **extra: Any) -> dict[str, Any]:
    """`extra` (e.g. the voter's score) goes right after the answer."""
    return {
        "retriever": c.retriever,
        "answer": c.answer,
        **extra,
        "passages": [passage_ref(p) for p in c.context.passages],
        "document": c.context.document,
        "error": c.error,
        "error_kind": c.error_kind,
        "tokens": {"prompt": c.tokens.prompt, "generated": c.tokens.generated, "cached": c.tokens.cached},
        "shared": list(c.shared),
        "cached_from": c.cached_from,
        "logprobs": list(c.logprobs) if c.logprobs is not None else None,
        "confidence": c.confidence,
    }


def candidate_from_dict(d: dict[str, Any]) -> Candidate:
    passages = tuple(Passage(p["id"], p.get("title", ""), "", p.get("source", ""), float(p.get("score", 0.0)))
                     for p in d.get("passages", ()))
    ctx = Context(d["retriever"], passages, d.get("document"))
    tokens = _tokens(d.get("tokens"))
    owner = d.get("cached_from")
    if owner is None and tokens.cached and not d["retriever"].endswith("@CP"):
        owner = d["retriever"] + "@CP"  # records before cached_from: the hit came from its own @CP prompt
    lps = d.get("logprobs")
    error = d.get("error")
    kind = d.get("error_kind") or (None if error is None else TIMEOUT if "timed out" in error else ERROR)  # older records
    return Candidate(d["retriever"], d.get("answer", ""), ctx, error, tokens,
                     tuple(d.get("shared", ())), owner, tuple(lps) if lps is not None else None, kind)


def _tokens(d: dict[str, Any] | None) -> ReaderTokens:
    return ReaderTokens(int(d.get("prompt", 0)), int(d.get("generated", 0)), int(d.get("cached", 0))) if d \
        else ReaderTokens()


def result_to_record(result: QuestionResult) -> dict[str, Any]:
    return {"question": result.question, "candidates": [candidate_to_dict(c) for c in result.candidates],
            "shared_tokens": {k: {"prompt": t.prompt, "generated": t.generated, "cached": t.cached}
                              for k, t in result.shared_tokens.items()}}


def result_from_record(d: dict[str, Any]) -> QuestionResult:
    return QuestionResult(d["question"], tuple(candidate_from_dict(c) for c in d["candidates"]),
                          {k: _tokens(v) for k, v in (d.get("shared_tokens") or {}).items()})
