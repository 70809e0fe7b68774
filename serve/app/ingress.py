"""The ingress deployment: the rpcs of eor.v1.Eor. Transport, auth, metrics and the reply;
the rounds of an Ask run in the orchestrator (serve/orchestrator.py) with the service's crew
(serve/app/handles.py: `ServiceCrew`).

Ray Serve's gRPC proxy calls `Ask`/`AskBatch`/`Generate`/`Health`/... (methods named after the
rpcs, `grpc_context` for status codes); the standalone front (serve/app/grpc_service.py) calls
`call(method, request, metadata, transport)`, and so does the HTTP front (serve/app/http.py,
through Ray Serve's HTTP proxy). All go through `call`, so validation, auth and the rounds are one
code path. A retriever group that errors, crashes or misses the deadline
does not fail the request: its specs come back as failed candidates, listed in `missing`.
"""
from __future__ import annotations

import asyncio
import hmac
import logging
import os
import time
from typing import Any, Sequence

import grpc
from ray import serve

from protos import eor_pb2
from retrievers.reader import SamplingParams
from retrievers.types import TIMEOUT
from serve.app import metrics
from serve.app.handles import ServiceCrew, bounded
from serve.app.health import HealthChecks
from serve.app.placement import Placed
from serve.app.admission import Admission
from serve.app.errors import (DeadlineExceeded, FailedPrecondition, NothingAnswered, Unauthenticated, Unimplemented,
                              grpc_trailers, pushback_of, reader_unavailable, status_of)
from serve.app.reader_watch import ReaderWatch
from serve.builder import source_shapes
from serve.config import EorConfig, reader_deployment
from serve.config_readers import reader_models
from serve.app.wire import (AskSpec, ask_reply, parse_ask, parse_generate, parse_retrieve,
                        parse_weights, retrieve_reply)
from serve.deadline import Deadline, ask_deadline
from voter.cascade import LoadRule, ServiceLoad

log = logging.getLogger(__name__)

OK = grpc.StatusCode.OK


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=256)
class EorIngress(Placed, HealthChecks):
    def __init__(self, settings: EorConfig, groups: list, group_specs: list, voter: Any, reader: Any,
                 sources: dict | None = None, generator: Any = None, readers: dict | None = None):
        """`reader`: the default reader's deployment; `readers`: the other served readers' by name
        (Health); `generator`: the deployment behind Generate (default: the reader)."""
        self.settings = settings
        self.sources = dict(sources or {})  # name -> source deployment (Retrieve)
        self.shapes = source_shapes(self.settings)  # what each source's hits are (search depths)
        self.limits = self.settings.service
        self.pool = list(self.settings.pool.specs)
        self.groups = list(zip([tuple(g) for g in group_specs], groups))
        self.voter = voter
        self.reader = reader
        self.readers = {reader_deployment(""): reader, **{reader_deployment(n): h for n, h in (readers or {}).items()}}
        self.generator = generator if generator is not None else reader  # Generate's model
        self.token = os.environ.get(self.limits.token_env, "") if self.limits.token_env else ""
        self.admission = Admission(self.limits.max_asks_running, self.limits.max_asks_queued,
                                   self.limits.max_wait_s)  # bounded queue
        self.watch = ReaderWatch({"": reader, **(readers or {})})  # readers' load, and which are down
        rule = LoadRule(self.limits.under_load_bar, self.limits.under_load_in_flight,
                        self.limits.under_load_on_overflow)
        self.under_load = rule if rule.on else None
        metrics.start_retriever_counters(self.pool)  # errors and timeouts read 0 before the first

    # ---- Ray Serve gRPC proxy entry points ------------------------------------------
    async def _proxy(self, method: str, request: Any, grpc_context: Any, empty: Any) -> Any:
        reply, code, details = await self.call(method, request, grpc_context.invocation_metadata()
                                               if grpc_context is not None else ())
        if code != OK:
            if grpc_context is not None:
                grpc_context.set_code(code)
                grpc_context.set_details(details)
                if grpc_trailers(reply):  # a refusal's retry pushback (gRPC A6)
                    grpc_context.set_trailing_metadata(list(grpc_trailers(reply)))
            return empty
        return reply

    async def Ask(self, request, grpc_context=None):  # noqa: N802 (named after the rpc)
        return await self._proxy("Ask", request, grpc_context, eor_pb2.AskReply())

    async def AskStream(self, request, grpc_context=None):  # noqa: N802
        """Server streaming through Ray Serve's gRPC proxy: the replies of `ask_stream`. Ray 2.60's
        proxy applies the status a servicer sets only with a message it yields, so an error
        goes out as one empty AskReply followed by the status (the client's read raises it)."""
        metadata = grpc_context.invocation_metadata() if grpc_context is not None else ()
        async for reply, code, details in self.ask_stream(request, metadata):
            if code != OK:
                if grpc_context is not None:
                    grpc_context.set_code(code)
                    grpc_context.set_details(details)
                    if grpc_trailers(reply):
                        grpc_context.set_trailing_metadata(list(grpc_trailers(reply)))
                yield eor_pb2.AskReply()
                return
            yield reply

    async def AskBatch(self, request, grpc_context=None):  # noqa: N802
        return await self._proxy("AskBatch", request, grpc_context, eor_pb2.AskBatchReply())

    async def Generate(self, request, grpc_context=None):  # noqa: N802
        return await self._proxy("Generate", request, grpc_context, eor_pb2.GenerateReply())

    async def Health(self, request, grpc_context=None):  # noqa: N802
        return await self._proxy("Health", request, grpc_context, eor_pb2.HealthReply())

    async def Retrieve(self, request, grpc_context=None):  # noqa: N802
        return await self._proxy("Retrieve", request, grpc_context, eor_pb2.RetrieveReply())

    async def SetVoterWeights(self, request, grpc_context=None):  # noqa: N802
        return await self._proxy("SetVoterWeights", request, grpc_context, eor_pb2.SetVoterWeightsReply())

    # ---- one code path for both fronts ---------------------------------------------
    async def call(self, method: str, request: Any, metadata: Sequence[tuple[str, Any]] = (),
                   transport: Deadline | None = None) -> tuple[Any, grpc.StatusCode, str]:
        """(reply, status code, details): the one code path of both fronts; on an error the reply is
        None, or the `Pushback` a refused caller should wait (errors.py: each front says it in its
        protocol). `transport`: the client's gRPC deadline, as the front saw it (Ray Serve's proxy
        does not tell)."""
        try:
            self._check_token(metadata)
            handler = {"Ask": lambda r: self._ask_one(r, transport), "AskBatch": lambda r: self._ask_batch(r, transport),
                       "Generate": lambda r: self._generate(r, transport), "Health": self._health,
                       "Retrieve": lambda r: self._retrieve(r, transport),
                       "SetVoterWeights": self._refuse_weights, "CheckVoterWeights": self._check_weights,
                       "VoterInfo": self._voter_info,
                       }.get(method)
            if handler is None:
                raise Unimplemented(f"no rpc {method!r}")
            reply, code, details = await handler(request), OK, ""
        except Exception as exc:  # never leak a traceback to the client: one table, one line
            code, details = status_of(exc)
            if code == grpc.StatusCode.INTERNAL:
                log.exception("%s failed", method)
            reply = pushback_of(exc)
        metrics.inc("eor_requests", rpc=method, code=code.name)
        return reply, code, details

    def __serve_build_asgi_app__(self):
        """The HTTP/JSON front and the web page (serve/app/http.py) over this replica's `call` and
        `ask_stream`: Ray Serve's HTTP proxy reaches them where build_app wraps this class as an
        ASGI ingress; the rpcs above stay as they are for both gRPC fronts."""
        from serve.app.http import build_http_app

        return build_http_app(self)

    async def _voter_info(self, request: Any = None) -> dict:
        """The voter the next Ask runs with (its rounds and stop thresholds), for the web page; not
        an rpc of the proto, as CheckVoterWeights is not: only the HTTP front asks for it."""
        from serve.app.wire import voter_json

        return voter_json(await self.voter.plan.remote())

    def _check_token(self, metadata: Sequence[tuple[str, Any]]) -> None:
        if not self.token:
            return
        got = ""
        for k, v in metadata or ():
            if k.lower() == "authorization":
                got = v.decode() if isinstance(v, bytes) else str(v)
        if not got.startswith("Bearer ") or not hmac.compare_digest(got[7:].encode(), self.token.encode()):
            raise Unauthenticated("missing or wrong bearer token")

    async def ask_stream(self, request: Any, metadata: Sequence[tuple[str, Any]] = (),
                         transport: Deadline | None = None):
        """AskStream's one code path (both fronts): (reply, status, details) for each round
        that left the question open, then the final reply; an error ends the stream with its
        status. When the caller goes away (this generator is closed or cancelled), the Ask's
        work is cancelled with it: its engine requests are aborted as a missed deadline's are."""
        try:
            self._check_token(metadata)
            spec = parse_ask(request, self.pool, self.limits, batch=False,
                             max_question_chars=self.settings.pool.max_question_chars, transport=transport)
        except Exception as exc:
            code, details = status_of(exc)
            metrics.inc("eor_requests", rpc="AskStream", code=code.name)
            yield pushback_of(exc), code, details
            return
        queue: asyncio.Queue = asyncio.Queue()

        async def provisional(replies: list[eor_pb2.AskReply]) -> None:
            await queue.put(replies[0])

        task = asyncio.ensure_future(self._admitted(spec, provisional))
        try:
            while True:
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield getter.result(), OK, ""
                    continue
                getter.cancel()
                while not queue.empty():
                    yield queue.get_nowait(), OK, ""
                break
            try:
                final = task.result()[0]
            except Exception as exc:
                code, details = status_of(exc)
                if code == grpc.StatusCode.INTERNAL:
                    log.exception("AskStream failed")
                metrics.inc("eor_requests", rpc="AskStream", code=code.name)
                yield pushback_of(exc), code, details
                return
            metrics.inc("eor_requests", rpc="AskStream", code=OK.name)
            yield final, OK, ""
        finally:
            if not task.done():
                task.cancel()

    async def _ask_one(self, request, transport: Deadline | None = None) -> eor_pb2.AskReply:
        spec = parse_ask(request, self.pool, self.limits, batch=False,
                         max_question_chars=self.settings.pool.max_question_chars, transport=transport)
        return (await self._admitted(spec))[0]

    async def _ask_batch(self, request, transport: Deadline | None = None) -> eor_pb2.AskBatchReply:
        spec = parse_ask(request, self.pool, self.limits, batch=True,
                         max_question_chars=self.settings.pool.max_question_chars, transport=transport)
        return eor_pb2.AskBatchReply(replies=await self._admitted(spec))

    async def _admitted(self, spec: AskSpec, on_provisional: Any = None) -> list[eor_pb2.AskReply]:
        """`_ask` once admission control gives it a running slot (serve/app/admission.py): a full
        queue, or a wait its deadline cannot afford, is refused at once (Overloaded)."""
        async with self.admission.slot(spec.deadline) as served:
            replies = await self._ask(spec, on_provisional)
            served.degraded = any(r.degraded for r in replies)
            return replies

    async def _ask(self, spec: AskSpec, on_provisional: Any = None) -> list[eor_pb2.AskReply]:
        """The voter's rounds (serve/orchestrator.py) over the retriever actors; explicitly named
        retrievers run as one round. `on_provisional(replies)`: awaited after each round that
        left questions open, with their provisional replies (final = false). While a reader the
        voter asks is down or starting (known before, or its rounds fail UNAVAILABLE), the voter's
        single-reader fallback answers and each reply says it is degraded."""
        t0 = time.perf_counter()
        plan = await self.voter.plan.remote()  # one voter for the whole Ask, even if another is pushed meanwhile
        if not spec.explicit:
            plan = await self._without_down(plan)
        try:
            return await self._rounds(spec, plan, t0, on_provisional)
        except Exception as exc:
            if spec.explicit or plan.degraded or not reader_unavailable(exc):
                raise
            fallback = await self._without_down(plan, failed=True)
            if fallback is plan:
                raise
            log.warning("a reader went down during an Ask: %s", fallback.degraded)
            return await self._rounds(spec, fallback, t0, on_provisional)

    async def _without_down(self, plan: Any, failed: bool = False) -> Any:
        """The plan, or its voter's single-reader fallback while a reader it asks besides the default one
        is down (`failed`: a round just failed UNAVAILABLE; read the readers afresh, and if none says
        so yet, take those readers as the ones down)."""
        from retrievers.spec import by_reader

        asks = {name for name in by_reader(plan.cascade.asked) if name}  # the fallback reads the default reader
        down = await self.watch.down(asks, fresh=failed)
        if not down and failed:
            down = {name: "" for name in asks}
        if not down:
            return plan
        fallback = await self.voter.plan.remote(tuple(sorted(down)))
        return plan if fallback is None else fallback

    async def _load(self, readers: Any) -> ServiceLoad:
        """The load the under-load rule reads: the readers' queues only when it reads them (a call each)."""
        in_flight = await self.watch.in_flight(readers) if self.under_load and self.under_load.in_flight else 0
        return ServiceLoad(in_flight, self.admission.overflowing())

    async def _rounds(self, spec: AskSpec, plan: Any, t0: float, on_provisional: Any = None) -> list[eor_pb2.AskReply]:
        from retrievers.spec import by_reader
        from serve.ensemble import VoteDeadline, cascade_for
        from serve.orchestrator import AskRounds

        min_confidence = self.limits.min_confidence if spec.min_confidence is None else spec.min_confidence
        readers = set(by_reader(plan.cascade.asked))
        rounds = AskRounds(spec.questions, cascade_for(plan.cascade, spec.retrievers if spec.explicit else None),
                           ServiceCrew(self.groups, self.sources, self.shapes, self.voter, plan.key), self.settings.pool,
                           spec.deadline, spec.documents, spec.top_k, self.limits.vote_reserve_s,
                           early_answer=on_provisional is not None, under_load=self.under_load,
                           load=lambda: self._load(readers))

        def reply(a: Any, latency_s: float, final: bool = True) -> eor_pb2.AskReply:
            return ask_reply(a.result, a.vote, a.result.failed, latency_s, rounds.reader_s / len(spec.questions),
                             plan.label, a.rounds_run, a.n_rounds, final=final, confidence=a.confidence,
                             min_confidence=min_confidence, under_load=a.under_load, degraded=plan.degraded)

        async def provisional(answers: list, positions: list[int]) -> None:
            now = time.perf_counter()
            await on_provisional([reply(a, now - t0, final=False) for a in answers])

        try:
            answers = await rounds.answer(on_provisional=provisional if on_provisional is not None else None)
        except VoteDeadline:
            raise DeadlineExceeded(
                f"the first vote did not finish within the {spec.deadline.seconds:g} s deadline") from None
        now = time.perf_counter()
        metrics.observe("eor_stage_seconds", now - t0, stage="total")
        for a in answers:  # no wrong OK: a question nothing answered fails the Ask
            failed = a.result.failed
            if failed and not any(c.answer and not c.error for c in a.result.candidates):
                lost = (f"no retriever answered {a.result.question[:80]!r} within the "
                        f"{spec.deadline.seconds:g} s deadline")
                if all(c.error_kind == TIMEOUT for c in a.result.candidates if c.error):  # nothing is down: no time
                    raise DeadlineExceeded(f"{lost}; the service is busy: try again later, or with a longer deadline")
                raise NothingAnswered(f"{lost} ({len(failed)} failed or missed it: "
                                      f"{', '.join(failed[:6])}{', ...' if len(failed) > 6 else ''}); Health "
                                      "names the parts that are down")
        replies = []
        for a in answers:
            if a.vote.margin is not None:
                metrics.observe("eor_vote_margin", a.vote.margin)
            metrics.inc("eor_stop_stage", stage=str(a.rounds_run))
            metrics.inc("eor_under_load_stops", float(a.under_load))
            metrics.inc("eor_degraded_answers", float(bool(plan.degraded)))
            replies.append(reply(a, now - t0))
            if a.confidence is not None:
                metrics.observe("eor_confidence", a.confidence.p)
            metrics.inc("eor_abstentions", float(replies[-1].abstained))
        return replies

    async def _retrieve(self, request, transport: Deadline | None = None) -> eor_pb2.RetrieveReply:
        """Each source searched until the service's default deadline or the client's, the shorter."""
        spec = parse_retrieve(request, sorted(self.sources), self.limits, self.settings.pool.max_question_chars)
        k = spec.k or self.settings.pool.default_k
        deadline = ask_deadline(None, self.limits.ask_deadline_s, transport)

        async def search(src: str):
            try:
                return await bounded(self.sources[src].search.remote(list(spec.questions), k), deadline)
            except asyncio.TimeoutError:
                return TimeoutError(f"missed the {deadline.seconds:g} s deadline")
        found = await asyncio.gather(*[search(s) for s in spec.sources], return_exceptions=True)
        return retrieve_reply(spec, dict(zip(spec.sources, found)))

    async def _check_weights(self, request) -> eor_pb2.SetVoterWeightsReply:
        """Pushed weights, checked against the pool (auth included). Applying them is the front's
        job: it holds the app and redeploys the Voter's user_config (serve/app/application.py). The front
        calls this as "CheckVoterWeights", a name no proxy routes (it is not in the proto)."""
        saved = parse_weights(request, self.pool, reader_models(self.settings))
        return eor_pb2.SetVoterWeightsReply(source="checked", retrievers=saved.kept_specs())

    async def _refuse_weights(self, request) -> eor_pb2.SetVoterWeightsReply:
        """SetVoterWeights through Ray Serve's own proxy: there is no front to redeploy the app."""
        await self._check_weights(request)
        raise FailedPrecondition(
                       "this endpoint cannot apply weights: push through `eor serve`'s gRPC front, or set the "
                       "Voter's user_config ({\"weights_file\": PATH}) in deploy/serve.yaml and `serve deploy` it")

    async def _generate(self, request, transport: Deadline | None = None) -> eor_pb2.GenerateReply:
        """Bounded by the client's deadline (none: unbounded, a long rewrite is its caller's call);
        past it, or when the client goes away, the engine requests are aborted (`bounded`)."""
        req = parse_generate(request, self.limits)
        from retrievers.reader import PromptText

        starts = list(req.starts) or [""] * len(req.prompts)
        prompts = [PromptText(p, req.cue or "Answer:", s) for p, s in zip(req.prompts, starts)]
        texts = list(req.prompts) if req.raw else prompts  # the reader formats typed prompts
        params = SamplingParams(max_tokens=req.max_tokens or 64, temperature=float(req.temperature),
                                stop=tuple(req.stop))
        try:
            outs = await bounded(self.generator.generate.remote(texts, params), transport)
        except asyncio.TimeoutError:
            raise DeadlineExceeded(f"Generate did not finish within the client's "
                                   f"{transport.seconds:g} s deadline") from None
        if not req.raw:
            outs = [p.reply(o) for p, o in zip(prompts, outs)]
        model = await self.generator.model_id.remote()
        return eor_pb2.GenerateReply(outputs=outs, model=model)
