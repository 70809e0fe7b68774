"""The wire format in Python: request validation and proto <-> pool/voter conversion.

Requests that do not parse (invalid UTF-8 in a string field, a wrong wire type) never reach
a handler as an exception: the lenient deserializer turns them into a `BadRequest`, which
the ingress answers with INVALID_ARGUMENT like every other input-limit violation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from protos import eor_pb2
from retrievers.types import QuestionResult
from serve.service_config import ServiceConfig

MAX_TOP_K = 100
MAX_DEADLINE_S = 3600.0


@dataclass(frozen=True)
class BadRequest:
    """Stands in for a request message that failed to parse."""

    message: str


def lenient(message_cls: type) -> Callable[[bytes], Any]:
    """Parse, or a BadRequest: invalid UTF-8 and truncation fail the parse; a known field sent
    with the wrong wire type (protobuf keeps it as an unknown field) is refused too. Unknown
    field numbers stay allowed (newer clients)."""
    from google.protobuf import unknown_fields

    name = message_cls.DESCRIPTOR.full_name
    known = {f.number: f.name for f in message_cls.DESCRIPTOR.fields}

    def deserialize(data: bytes) -> Any:
        try:
            msg = message_cls.FromString(data)
        except Exception as exc:  # DecodeError: invalid UTF-8, truncation, bad tags
            return BadRequest(f"request is not a valid {name}: {exc}")
        mistyped = sorted({known[f.field_number] for f in unknown_fields.UnknownFieldSet(msg)
                           if f.field_number in known})
        if mistyped:
            return BadRequest(f"request is not a valid {name}: wrong type for field(s) {', '.join(mistyped)}")
        return msg
    return deserialize


class InvalidArgument(ValueError):
    """An input-limit violation; the message goes back to the client."""


def check_question(q: Any, limits: ServiceConfig, where: str = "question") -> str:
    if not isinstance(q, str):
        raise InvalidArgument(f"{where} must be a string")
    text = q.strip()
    if not text:
        raise InvalidArgument(f"{where} is empty")
    if len(text) > limits.max_question_chars:
        raise InvalidArgument(f"{where} too long: {len(text)} characters (limit {limits.max_question_chars})")
    return text


@dataclass(frozen=True)
class AskSpec:
    questions: tuple[str, ...]
    retrievers: tuple[str, ...]  # in pool order
    top_k: int  # 0: the pool default
    deadline_s: float  # 0: none


def parse_ask(request: Any, pool: Sequence[str], limits: ServiceConfig, batch: bool) -> AskSpec:
    if isinstance(request, BadRequest):
        raise InvalidArgument(request.message)
    if batch:
        qs = list(request.questions)
        if not qs:
            raise InvalidArgument("questions is empty")
        if len(qs) > limits.max_batch:
            raise InvalidArgument(f"batch too large: {len(qs)} questions (limit {limits.max_batch})")
        questions = tuple(check_question(q, limits, f"questions[{i}]") for i, q in enumerate(qs))
    else:
        questions = (check_question(request.question, limits),)
    unknown = [s for s in request.retrievers if s not in pool]
    if unknown:
        raise InvalidArgument(f"unknown retriever(s) {unknown}; the pool: {', '.join(pool)}")
    wanted = set(request.retrievers)
    retrievers = tuple(s for s in pool if not wanted or s in wanted)
    if request.top_k > MAX_TOP_K:
        raise InvalidArgument(f"top_k {request.top_k} above the limit {MAX_TOP_K}")
    d = float(request.deadline_s)
    if not math.isfinite(d) or d < 0 or d > MAX_DEADLINE_S:
        raise InvalidArgument(f"deadline_s must be in [0, {MAX_DEADLINE_S}] (0: the server default), got {d}")
    return AskSpec(questions, retrievers, int(request.top_k), d)


def parse_generate(request: Any, limits: ServiceConfig) -> eor_pb2.GenerateRequest:
    if isinstance(request, BadRequest):
        raise InvalidArgument(request.message)
    if not request.prompts:
        raise InvalidArgument("prompts is empty")
    if len(request.prompts) > limits.max_prompts:
        raise InvalidArgument(f"too many prompts: {len(request.prompts)} (limit {limits.max_prompts})")
    for i, p in enumerate(request.prompts):
        if not p.strip():
            raise InvalidArgument(f"prompts[{i}] is empty")
        if len(p) > limits.max_prompt_chars:
            raise InvalidArgument(f"prompts[{i}] too long: {len(p)} characters (limit {limits.max_prompt_chars})")
    if request.max_tokens > limits.max_tokens:
        raise InvalidArgument(f"max_tokens {request.max_tokens} above the limit {limits.max_tokens}")
    t = float(request.temperature)
    if not math.isfinite(t) or not 0 <= t <= 2:
        raise InvalidArgument(f"temperature must be in [0, 2], got {t}")
    return request


def ask_reply(result: QuestionResult, vote: Any, missing: Sequence[str], latency_s: float) -> eor_pb2.AskReply:
    """One question's reply: the vote, every candidate with its score, the winner's evidence."""
    reply = eor_pb2.AskReply(question=result.question, answer=vote.answer if vote else "",
                             retriever=(vote.retriever or "") if vote else "", latency_s=latency_s)
    if vote is not None and vote.score is not None:
        reply.score = vote.score
    if vote is not None and vote.margin is not None:
        reply.margin = vote.margin
    scores = vote.scores if vote is not None else {}
    for c in result.candidates:
        cand = eor_pb2.Candidate(retriever=c.retriever, answer=c.answer, error=c.error or "")
        s = scores.get(c.retriever)
        if s is not None:
            cand.score = s
        reply.candidates.append(cand)
        if vote is not None and c.retriever == vote.retriever:
            for p in c.context.passages:
                reply.passages.append(eor_pb2.Passage(id=p.pid, title=p.title, text=p.text,
                                                      source=p.source, score=float(p.score)))
            reply.document = c.context.document or ""
    reply.missing.extend(missing)
    return reply
