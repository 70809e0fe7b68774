"""The wire format in Python: request validation and proto <-> pool/voter conversion.

Requests that do not parse (invalid UTF-8 in a string field, a wrong wire type) never reach
a handler as an exception: the lenient deserializer turns them into a `BadRequest`, which
the ingress answers with INVALID_ARGUMENT like every other input-limit violation.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from protos import eor_pb2
from retrievers.types import Passage, QuestionResult
from retrievers.pool import MAX_QUESTION_CHARS, QuestionError
from retrievers.pool import check_question as pool_check_question
from serve.app.errors import InvalidArgument
from serve.config import ServiceConfig
from serve.deadline import Deadline, InvalidDeadline, ask_deadline

MAX_TOP_K = 100
MAX_REQUEST_BYTES = 4 * 2**20  # a request message (gRPC) or body (HTTP), both fronts


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


def json_request(body: bytes, message_cls: type) -> Any:
    """An HTTP body as the request message, by proto3's JSON mapping (field names as in
    protos/eor.proto, or their lowerCamelCase), or a BadRequest as `lenient` gives: the handler
    then answers INVALID_ARGUMENT after the token check, as for a gRPC request that does not parse.
    Unknown fields are refused (a misspelt option must not pass silently)."""
    from google.protobuf import json_format

    name = message_cls.DESCRIPTOR.full_name
    try:
        data = json.loads(body.decode("utf-8")) if body.strip() else {}
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return BadRequest(f"request is not valid JSON: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    if not isinstance(data, dict):
        return BadRequest(f"request must be a JSON object (a {name}), got {type(data).__name__}")
    try:
        return json_format.ParseDict(data, message_cls(), max_recursion_depth=20)
    except Exception as exc:  # ParseError; RecursionError on deep nesting
        first = (str(exc).splitlines() or [""])[0][:300]
        return BadRequest(f"request is not a valid {name}: {first}")


def reply_json(message: Any) -> dict:
    """A reply message as JSON, the mapping `json_request` reads: proto field names, every field
    (optional ones only when set), 64-bit counters as numbers."""
    from google.protobuf import json_format

    return json_format.MessageToDict(message, always_print_fields_with_no_presence=True,
                                     preserving_proto_field_name=True, unquote_int64_if_possible=True)


def voter_json(plan: Any) -> dict:
    """The voter an Ask runs with (Voter.plan), as the web page's "what ships" view shows it: its
    id, rounds, the P(right) each round must reach to stop there, the stream's preview."""
    cascade = plan.cascade
    return {"id": plan.key.split(":")[0], "label": plan.label,
            "rounds": [list(s) for s in cascade.rounds],
            "thresholds": [t if math.isfinite(t) else None for t in cascade.thresholds],
            "preview": list(cascade.preview), "fit_stop_rate": list(cascade.fit_stop_rate)}


def check_question(q: Any, max_chars: int = MAX_QUESTION_CHARS, where: str = "question") -> str:
    """The core's check (retrievers/pool.py: check_question, the pool's limit), as INVALID_ARGUMENT."""
    if not isinstance(q, str):
        raise InvalidArgument(f"{where} must be a string")
    try:
        return pool_check_question(q, max_chars)
    except QuestionError as exc:
        raise InvalidArgument(f"{where}: {exc}") from None


def check_questions(qs: Sequence[Any], limits: ServiceConfig, max_chars: int = MAX_QUESTION_CHARS) -> tuple[str, ...]:
    """A batch's questions: at least one, at most `max_batch`, each checked."""
    if not qs:
        raise InvalidArgument("questions is empty")
    if len(qs) > limits.max_batch:
        raise InvalidArgument(f"batch too large: {len(qs)} questions (limit {limits.max_batch})")
    return tuple(check_question(q, max_chars, f"questions[{i}]") for i, q in enumerate(qs))


@dataclass(frozen=True)
class AskSpec:
    questions: tuple[str, ...]
    retrievers: tuple[str, ...]  # in pool order
    top_k: int  # 0: the pool default
    deadline: Deadline  # the Ask's one deadline: its own, the service's default, the client's gRPC one
    documents: tuple[tuple[Passage, ...], ...] | None = None  # per question; () for "search"
    explicit: bool = False  # the request named its retrievers: they run, as one stage
    min_confidence: float | None = None  # abstain below this P(right); None: the service's default


def parse_documents(docs: Sequence[Any], limits: ServiceConfig, where: str) -> tuple[Passage, ...]:
    if len(docs) > limits.max_documents:
        raise InvalidArgument(f"{where}: too many documents: {len(docs)} (limit {limits.max_documents})")
    out = []
    for i, d in enumerate(docs):
        if not d.text.strip():
            raise InvalidArgument(f"{where}[{i}] has no text")
        if len(d.text) + len(d.title) > limits.max_document_chars:
            raise InvalidArgument(f"{where}[{i}] too long: {len(d.text) + len(d.title)} characters "
                                  f"(limit {limits.max_document_chars})")
        out.append(Passage(d.id or f"doc:{i}", d.title, d.text, d.source or "given", float(d.score)))
    return tuple(out)


def parse_ask(request: Any, pool: Sequence[str], limits: ServiceConfig, batch: bool,
              max_question_chars: int = MAX_QUESTION_CHARS, transport: Deadline | None = None) -> AskSpec:
    """`max_question_chars`: the pool's limit (pool.max_question_chars), the one the core checks;
    `transport`: the client's gRPC deadline (the front's), which the Ask's deadline never passes."""
    if isinstance(request, BadRequest):
        raise InvalidArgument(request.message)
    if batch:
        questions = check_questions(request.questions, limits, max_question_chars)
        documents = None
        if request.documents:
            if len(request.documents) != len(questions):
                raise InvalidArgument(f"documents has {len(request.documents)} entries for {len(questions)} questions "
                                      "(one per question, or none)")
            documents = tuple(parse_documents(d.passages, limits, f"documents[{i}]")
                              for i, d in enumerate(request.documents))
    else:
        questions = (check_question(request.question, max_question_chars),)
        documents = (parse_documents(request.documents, limits, "documents"),) if request.documents else None
    unknown = [s for s in request.retrievers if s not in pool]
    if unknown:
        raise InvalidArgument(f"unknown retriever(s) {unknown}; the pool: {', '.join(pool)}")
    wanted = set(request.retrievers)
    retrievers = tuple(s for s in pool if not wanted or s in wanted)
    if request.top_k > MAX_TOP_K:
        raise InvalidArgument(f"top_k {request.top_k} above the limit {MAX_TOP_K}")
    try:  # validated once, here: the one Deadline the Ask carries to every call
        deadline = ask_deadline(request.deadline_s if request.HasField("deadline_s") else None,
                                limits.ask_deadline_s, transport)
    except InvalidDeadline as exc:
        raise InvalidArgument(str(exc)) from None
    return AskSpec(questions, retrievers, int(request.top_k), deadline, documents, bool(request.retrievers),
                   parse_min_confidence(request))


def parse_min_confidence(request: Any) -> float | None:
    """The request's min_confidence (None when unset: the service's default applies)."""
    from voter.decision import check_min_confidence

    if not request.HasField("min_confidence"):
        return None
    try:
        return check_min_confidence(request.min_confidence)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None


@dataclass(frozen=True)
class RetrieveSpec:
    questions: tuple[str, ...]
    k: int  # 0: the pool default
    sources: tuple[str, ...]


def parse_retrieve(request: Any, sources: Sequence[str], limits: ServiceConfig,
                   max_question_chars: int = MAX_QUESTION_CHARS) -> RetrieveSpec:
    if isinstance(request, BadRequest):
        raise InvalidArgument(request.message)
    questions = check_questions(request.questions, limits, max_question_chars)
    unknown = [s for s in request.sources if s not in sources]
    if unknown:
        raise InvalidArgument(f"unknown source(s) {unknown}; sources: {', '.join(sources)}")
    if request.k > MAX_TOP_K:
        raise InvalidArgument(f"k {request.k} above the limit {MAX_TOP_K}")
    return RetrieveSpec(questions, int(request.k), tuple(request.sources) or tuple(sources))


def retrieve_reply(spec: RetrieveSpec, hits: dict[str, Any]) -> eor_pb2.RetrieveReply:
    """`hits`: source -> list of passage lists (one per question), or an exception."""
    reply = eor_pb2.RetrieveReply()
    for qi, q in enumerate(spec.questions):
        res = reply.results.add(question=q)
        for src in spec.sources:
            got = hits[src]
            if isinstance(got, BaseException):
                res.sources.add(source=src, error=f"{type(got).__name__}: {got}"[:500])
                continue
            res.sources.add(source=src, passages=[_passage(p) for p in got[qi]])
    return reply


def _passage(p: Passage) -> eor_pb2.Passage:
    return eor_pb2.Passage(id=p.pid, title=p.title, text=p.text, source=p.source, score=float(p.score))


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
    if request.starts:
        if request.raw:
            raise InvalidArgument("starts needs raw = false (a raw prompt is sent as it is)")
        if len(request.starts) != len(request.prompts):
            raise InvalidArgument(f"starts has {len(request.starts)} entries for {len(request.prompts)} prompts")
        for i, s in enumerate(request.starts):
            if len(s) > limits.max_prompt_chars:
                raise InvalidArgument(f"starts[{i}] too long: {len(s)} characters (limit {limits.max_prompt_chars})")
    if request.max_tokens > limits.max_tokens:
        raise InvalidArgument(f"max_tokens {request.max_tokens} above the limit {limits.max_tokens}")
    t = float(request.temperature)
    if not math.isfinite(t) or not 0 <= t <= 2:
        raise InvalidArgument(f"temperature must be in [0, 2], got {t}")
    return request


def ask_reply(result: QuestionResult, vote: Any, missing: Sequence[str], latency_s: float,
              reader_s: float = 0.0, voter: str = "", stopped_at: int = 0, stages: int = 0,
              final: bool = True, confidence: Any = None, min_confidence: float = 0.0, under_load: bool = False,
              degraded: str = "") -> eor_pb2.AskReply:
    """One question's reply: the vote, its confidence (voter/decision.py: Confidence), every
    candidate with its score, the winner's evidence, the voter, what ran and where the cascade
    stopped; below `min_confidence` an abstention, the voted answer in `guess`; whether it stopped
    early under load, and why it is degraded (a reader down: the voter's fallback answered)."""
    from voter.decision import abstains

    answer = vote.answer if vote else ""
    unsure = abstains(confidence, min_confidence)
    reply = eor_pb2.AskReply(question=result.question, answer="" if unsure else answer,
                             retriever=(vote.retriever or "") if vote else "", latency_s=latency_s,
                             reader_s=reader_s, voter=voter, stopped_at_stage=stopped_at, stages=stages,
                             final=final, abstained=unsure, guess=answer if unsure else "",
                             confidence_kind=confidence.kind if confidence is not None else "none",
                             under_load=under_load, degraded=degraded)
    if confidence is not None:
        reply.confidence = confidence.p
    reply.ran.extend(c.retriever for c in result.candidates)
    work = result.reader_tokens()
    reply.prompt_tokens, reply.cached_prompt_tokens, reply.generated_tokens = work.prompt, work.cached, work.generated
    if vote is not None and vote.score is not None:
        reply.score = vote.score
    if vote is not None and vote.margin is not None:
        reply.margin = vote.margin
    scores = vote.scores if vote is not None else {}
    for c in result.candidates:
        cand = eor_pb2.Candidate(retriever=c.retriever, answer=c.answer, error=c.error or "",
                                 error_kind=c.error_kind or "",
                                 token_logprobs=list(c.logprobs or ()))
        if c.confidence is not None:
            cand.confidence = c.confidence
        s = scores.get(c.retriever)
        if s is not None:
            cand.score = s
        reply.candidates.append(cand)
        if vote is not None and c.retriever == vote.retriever:
            reply.passages.extend(_passage(p) for p in c.context.passages)
            reply.document = c.context.document or ""
    reply.missing.extend(missing)
    return reply


MAX_WEIGHTS_CHARS = 1_000_000


def parse_weights(request: Any, pool: Sequence[str], readers: Mapping[str, str]) -> Any:
    """A pushed weights file (SetVoterWeights), parsed and checked against the live pool and its
    readers (name -> model): the voter the service would run, its single-reader fallback if a
    reader it names is missing (voter/question_vote.py: checked_choice)."""
    from voter.question_vote import checked_choice
    from voter.weights_io import SavedWeights

    if isinstance(request, BadRequest):
        raise InvalidArgument(request.message)
    text = request.weights_json
    if not text.strip():
        raise InvalidArgument("weights_json is empty")
    if len(text) > MAX_WEIGHTS_CHARS:
        raise InvalidArgument(f"weights_json too long: {len(text)} characters (limit {MAX_WEIGHTS_CHARS})")
    try:
        saved = checked_choice(SavedWeights.from_dict(json.loads(text)), "pushed", pool, readers).saved
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidArgument(f"weights refused: {type(exc).__name__}: {exc}"[:2000]) from None
    return saved
