"""The ingress deployment: the four rpcs of eor.v1.Eor.

Ray Serve's gRPC proxy calls `Ask`/`AskBatch`/`Generate`/`Health` (methods named after the
rpcs, `grpc_context` for status codes); the standalone front (serve/app/grpc_service.py) calls
`call(method, request, metadata)`. Both go through `_dispatch`, so validation, auth and the
fan-out are one code path.

Ask: fan out to every retriever group (each with a deadline) -> merge candidates in pool
order -> vote. A group that errors, crashes or misses its deadline does not fail the request:
its specs come back as failed candidates and are listed in `missing`; the vote is over the rest.
"""
from __future__ import annotations

import asyncio
import hmac
import logging
import os
import time
from typing import Any, Sequence

import grpc
from ray import exceptions as ray_exceptions
from ray import serve

from protos import eor_pb2
from retrievers.pool import QuestionWork
from retrievers.reader import SamplingParams
from retrievers.types import ERROR, TIMEOUT, Candidate, Failure, QuestionResult
from serve.app import metrics
from serve.app.handles import bounded
from serve.app.health import HealthChecks
from serve.app.placement import Placed
from serve.app.errors import (DeadlineExceeded, FailedPrecondition, Unauthenticated, Unimplemented, reader_unavailable,
                              status_of)
from serve.builder import source_shapes
from serve.config import config_from_dict
from serve.app.wire import (AskSpec, ask_reply, parse_ask, parse_generate, parse_retrieve,
                        parse_weights, retrieve_reply)

log = logging.getLogger(__name__)

OK = grpc.StatusCode.OK


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=256)
class EorIngress(Placed, HealthChecks):
    def __init__(self, settings: dict, groups: list, group_specs: list, voter: Any, reader: Any,
                 sources: dict | None = None, generator: Any = None):
        self.settings = config_from_dict(settings)
        self.sources = dict(sources or {})  # name -> source deployment (Retrieve)
        self.shapes = source_shapes(self.settings)  # what each source's hits are (search depths)
        self.limits = self.settings.service
        self.pool = list(self.settings.pool.specs)
        self.groups = list(zip([tuple(g) for g in group_specs], groups))
        self.voter = voter
        self.reader = reader
        self.generator = generator if generator is not None else reader  # Generate's model
        self.token = os.environ.get(self.limits.token_env, "") if self.limits.token_env else ""

    # ---- Ray Serve gRPC proxy entry points ------------------------------------------
    async def _proxy(self, method: str, request: Any, grpc_context: Any, empty: Any) -> Any:
        reply, code, details = await self.call(method, request, grpc_context.invocation_metadata()
                                               if grpc_context is not None else ())
        if code != OK:
            if grpc_context is not None:
                grpc_context.set_code(code)
                grpc_context.set_details(details)
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
    async def call(self, method: str, request: Any,
                   metadata: Sequence[tuple[str, Any]] = ()) -> tuple[Any, grpc.StatusCode, str]:
        """(reply or None, status code, details): the one code path of both fronts."""
        try:
            self._check_token(metadata)
            handler = {"Ask": self._ask_one, "AskBatch": self._ask_batch, "Generate": self._generate,
                       "Health": self._health, "Retrieve": self._retrieve,
                       "SetVoterWeights": self._refuse_weights, "CheckVoterWeights": self._check_weights,
                       }.get(method)
            if handler is None:
                raise Unimplemented(f"no rpc {method!r}")
            reply, code, details = await handler(request), OK, ""
        except Exception as exc:  # never leak a traceback to the client: one table, one line
            code, details = status_of(exc)
            if code == grpc.StatusCode.INTERNAL:
                log.exception("%s failed", method)
            reply = None
        metrics.inc("eor_requests", rpc=method, code=code.name)
        return reply, code, details

    def _check_token(self, metadata: Sequence[tuple[str, Any]]) -> None:
        if not self.token:
            return
        got = ""
        for k, v in metadata or ():
            if k.lower() == "authorization":
                got = v.decode() if isinstance(v, bytes) else str(v)
        if not got.startswith("Bearer ") or not hmac.compare_digest(got[7:].encode(), self.token.encode()):
            raise Unauthenticated("missing or wrong bearer token")

    async def ask_stream(self, request: Any, metadata: Sequence[tuple[str, Any]] = ()):
        """AskStream's one code path (both fronts): (reply, status, details) for each round
        that left the question open, then the final reply; an error ends the stream with its
        status. When the caller goes away (this generator is closed or cancelled), the Ask's
        work is cancelled with it: its engine requests are aborted as a missed deadline's are."""
        try:
            self._check_token(metadata)
            spec = parse_ask(request, self.pool, self.limits, batch=False,
                             max_question_chars=self.settings.pool.max_question_chars)
        except Exception as exc:
            code, details = status_of(exc)
            metrics.inc("eor_requests", rpc="AskStream", code=code.name)
            yield None, code, details
            return
        queue: asyncio.Queue = asyncio.Queue()

        async def provisional(replies: list[eor_pb2.AskReply]) -> None:
            await queue.put(replies[0])

        task = asyncio.ensure_future(self._ask(spec, provisional))
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
                yield None, code, details
                return
            metrics.inc("eor_requests", rpc="AskStream", code=OK.name)
            yield final, OK, ""
        finally:
            if not task.done():
                task.cancel()

    async def _ask_one(self, request) -> eor_pb2.AskReply:
        spec = parse_ask(request, self.pool, self.limits, batch=False,
                             max_question_chars=self.settings.pool.max_question_chars)
        return (await self._ask(spec))[0]

    async def _ask_batch(self, request) -> eor_pb2.AskBatchReply:
        spec = parse_ask(request, self.pool, self.limits, batch=True,
                         max_question_chars=self.settings.pool.max_question_chars)
        return eor_pb2.AskBatchReply(replies=await self._ask(spec))

    async def _group(self, handle: Any, questions: list[str], specs: list[str], top_k: int, timeout: float,
                     documents: Any = None, shared: list | None = None, plan_specs: list[str] | None = None):
        return await bounded(handle.run.remote(questions, specs, top_k, documents, timeout, shared, plan_specs),
                              timeout)

    async def _ask(self, spec: AskSpec, on_provisional: Any = None) -> list[eor_pb2.AskReply]:
        """The voter's cascade (serve/ensemble.py), each stage fanned out over the retriever
        actors that hold its specs; explicitly named retrievers run as one stage.
        `on_provisional(replies)`: awaited after each round that left questions open, with
        their provisional replies (final = false)."""
        from retrievers.spec import parse_spec
        from serve.ensemble import EnsembleAnswer, VoteDeadline, answer_async, cascade_for

        t0 = time.perf_counter()
        budget = self.limits.retriever_timeout_s
        if spec.deadline_s:
            budget = min(budget, spec.deadline_s)
        min_confidence = self.limits.min_confidence if spec.min_confidence is None else spec.min_confidence
        plan = await self.voter.plan.remote()  # one voter for the whole Ask, even if another is pushed meanwhile
        cascade = cascade_for(plan.cascade, spec.retrievers if spec.explicit else None)
        reader_s = [0.0]
        plan_specs = [s for stage in cascade.stages for s in stage]
        work = [QuestionWork() for _ in spec.questions]  # one plan per question, shared by its stages

        async def run_stage(open_: list[int], specs: list[str]) -> list[QuestionResult]:
            timeout = max(budget - (time.perf_counter() - t0), 0.001)
            qs, shared = [spec.questions[i] for i in open_], [work[i] for i in open_]
            docs = [spec.documents[i] for i in open_] if spec.documents is not None else None
            if docs is None:
                await self._search_once(qs, shared, specs, plan_specs, spec.top_k, timeout)
            quick = [s for s in specs if parse_spec(s).reader_steps == 1]
            first = list(specs) == list(cascade.stages[0])
            if on_provisional is None or not first or not quick or len(quick) == len(specs):
                results, spent = await self._fan_out(qs, specs, spec.top_k, docs, timeout, shared, plan_specs)
                reader_s[0] += spent
                return results
            # a stream's first answer comes as soon as round 1's one-step retrievers have read (no
            # compression or parametric passage to wait for); the rest of the round reads meanwhile
            later = asyncio.ensure_future(self._fan_out(qs, [s for s in specs if s not in quick], spec.top_k, docs,
                                                        timeout, shared, plan_specs))
            try:
                early, spent = await self._fan_out(qs, quick, spec.top_k, docs, timeout, shared, plan_specs)
                reader_s[0] += spent
                await early_answer(open_, early)
                late, spent = await later
            finally:
                later.cancel()
            reader_s[0] += spent
            return [in_order(a, b, specs) for a, b in zip(early, late)]

        def in_order(a: QuestionResult, b: QuestionResult, specs: list[str]) -> QuestionResult:
            by = {c.retriever: c for c in a.candidates + b.candidates}
            return QuestionResult(a.question, tuple(by[s] for s in specs if s in by),
                                  {**a.shared_tokens, **b.shared_tokens})

        async def early_answer(open_: list[int], results: list[QuestionResult]) -> None:
            try:
                decisions = await vote(results, 0)
            except VoteDeadline:  # no early answer; the round's own vote still runs
                return
            n = len(cascade.stages)
            await provisional([EnsembleAnswer.of(r, d, 0, n) for r, d in zip(results, decisions)], open_)

        async def vote(results: list[QuestionResult], stage: int):
            t = time.perf_counter()
            reserve = min(self.limits.vote_reserve_s, budget / 4)  # a vote always gets this much
            try:
                out = await bounded(self.voter.decide.remote([r.for_vote() for r in results], plan.key, cascade, stage),
                                     max(budget - (t - t0), reserve))
            except asyncio.TimeoutError as exc:
                if isinstance(exc, ray_exceptions.RayError):  # the voter failed; it did not run late
                    raise
                raise VoteDeadline from None
            metrics.observe("eor_stage_seconds", time.perf_counter() - t, stage="vote")
            return out

        def time_left() -> float:  # the next stage needs time for its reading and the vote after it
            return budget - (time.perf_counter() - t0) - min(self.limits.vote_reserve_s, budget / 4)

        async def provisional(answers, positions) -> None:
            if on_provisional is None:
                return
            now = time.perf_counter()
            await on_provisional([ask_reply(a.result, a.vote, a.result.failed, now - t0, reader_s[0] / len(spec.questions),
                                            plan.label, a.stopped_at, a.stages, final=False, confidence=a.confidence,
                                            min_confidence=min_confidence) for a in answers])

        try:
            answers = await answer_async(spec.questions, cascade, run_stage, vote, time_left=time_left,
                                         on_provisional=provisional)
        except VoteDeadline:
            raise DeadlineExceeded(
                           f"the first vote did not finish within the {budget:g} s deadline") from None
        voter = plan.label
        now = time.perf_counter()
        metrics.observe("eor_stage_seconds", now - t0, stage="total")
        replies = []
        for a in answers:
            if a.vote.margin is not None:
                metrics.observe("eor_vote_margin", a.vote.margin)
            metrics.inc("eor_stop_stage", stage=str(a.stopped_at))
            replies.append(ask_reply(a.result, a.vote, a.result.failed, now - t0, reader_s[0] / len(answers),
                                     voter, a.stopped_at, a.stages, confidence=a.confidence,
                                     min_confidence=min_confidence))
            if a.confidence is not None:
                metrics.observe("eor_confidence", a.confidence.p)
            metrics.inc("eor_abstentions", float(replies[-1].abstained))
        return replies

    async def _search_once(self, qs: list[str], shared: list[QuestionWork], specs: list[str],
                           plan_specs: list[str], top_k: int, timeout: float) -> None:
        """Each source this stage reads, searched once per question (at the depth every retriever
        of the question's plan needs) unless an earlier stage did; the retriever actors then
        only process the hits. A search that fails or misses the deadline is recorded in the
        question's work (`QuestionWork.failed`): the retrievers that read the source report it
        at once, and the others go on (in one actor or sixteen)."""
        from dataclasses import replace

        from retrievers.pool import pending_searches, record_search, search_depths
        from retrievers.spec import parse_spec

        config = replace(self.settings.pool, default_k=top_k) if top_k else self.settings.pool
        calls = [c for c in pending_searches(
                     shared, search_depths([parse_spec(s) for s in specs], config, self.shapes),
                     search_depths([parse_spec(s) for s in plan_specs], config, self.shapes))
                 if c[0] in self.sources]
        outs = await asyncio.gather(*[bounded(self.sources[src].search.remote([qs[j] for j in todo], k), timeout)
                                      for src, todo, k in calls], return_exceptions=True)
        for (src, todo, k), out in zip(calls, outs):
            if isinstance(out, BaseException):  # not searched again for these questions: the retrievers
                out = (Failure(TIMEOUT, f"{src} search timed out after {timeout:g} s")  # that read it report it
                       if isinstance(out, asyncio.TimeoutError)
                       else Failure(ERROR, f"{src} search failed: {status_of(out)[1]}"))
            record_search(shared, src, todo, k, out)

    async def _fan_out(self, qs: list[str], wanted_specs: list[str], top_k: int, docs: Any,
                       timeout: float, work: list[QuestionWork] | None = None,
                       plan_specs: list[str] | None = None) -> tuple[list[QuestionResult], float]:
        """One stage: the retriever groups holding `wanted_specs`, each under the deadline; a group
        that errors or misses it comes back as failed candidates. `work`: each question's shared
        work, passed to every group and extended with what they did."""
        wanted = set(wanted_specs)
        calls = [(sub, handle) for specs, handle in self.groups if (sub := [s for s in specs if s in wanted])]
        outcomes = await asyncio.gather(*[self._group(h, qs, sub, top_k, timeout, docs, work, plan_specs)
                                          for sub, h in calls], return_exceptions=True)
        by_spec: list[dict[str, Candidate]] = [{} for _ in qs]
        shared: list[dict] = [{} for _ in qs]
        reader_s = 0.0
        for (sub, _), out in zip(calls, outcomes):
            if isinstance(out, BaseException) and reader_unavailable(out):
                raise out  # nothing can be read: UNAVAILABLE, with the reader's own line
            if isinstance(out, BaseException):
                why = (Failure(TIMEOUT, f"timed out after {timeout:g} s") if isinstance(out, asyncio.TimeoutError)
                       else Failure(ERROR, f"retriever actor failed: {type(out).__name__}"))
                for s in sub:
                    for d in by_spec:
                        d[s] = Candidate.failed(s, why)
                continue
            reader_s += out.reader_s
            for w, theirs in zip(work or (), getattr(out, "shared", None) or ()):
                w.merge(theirs)
            for d, sh, result in zip(by_spec, shared, out.results):
                sh.update(result.shared_tokens)
                for c in result.candidates:
                    d[c.retriever] = c
        results = [QuestionResult(q, tuple(d[s] for s in wanted_specs if s in d), sh)
                   for q, d, sh in zip(qs, by_spec, shared)]
        for c in (c for r in results for c in r.candidates):  # each failed answer, by its kind
            if c.error_kind is not None:
                metrics.inc("eor_retriever_timeouts" if c.error_kind == TIMEOUT else "eor_retriever_errors",
                            retriever=c.retriever)
        return results, reader_s

    async def _retrieve(self, request) -> eor_pb2.RetrieveReply:
        spec = parse_retrieve(request, sorted(self.sources), self.limits, self.settings.pool.max_question_chars)
        k = spec.k or self.settings.pool.default_k
        timeout = self.limits.retriever_timeout_s

        async def search(src: str):
            return await bounded(self.sources[src].search.remote(list(spec.questions), k), timeout)
        found = await asyncio.gather(*[search(s) for s in spec.sources], return_exceptions=True)
        return retrieve_reply(spec, dict(zip(spec.sources, found)))

    async def _check_weights(self, request) -> eor_pb2.SetVoterWeightsReply:
        """Pushed weights, checked against the pool (auth included). Applying them is the front's
        job: it holds the app and redeploys the Voter's user_config (serve/app/application.py). The front
        calls this as "CheckVoterWeights", a name no proxy routes (it is not in the proto)."""
        saved = parse_weights(request, self.pool)
        return eor_pb2.SetVoterWeightsReply(source="checked", retrievers=saved.kept_specs())

    async def _refuse_weights(self, request) -> eor_pb2.SetVoterWeightsReply:
        """SetVoterWeights through Ray Serve's own proxy: there is no front to redeploy the app."""
        await self._check_weights(request)
        raise FailedPrecondition(
                       "this endpoint cannot apply weights: push through `eor serve`'s gRPC front, or set the "
                       "Voter's user_config ({\"weights_file\": PATH}) in deploy/serve.yaml and `serve deploy` it")

    async def _generate(self, request) -> eor_pb2.GenerateReply:
        req = parse_generate(request, self.limits)
        from retrievers.reader import PromptText

        starts = list(req.starts) or [""] * len(req.prompts)
        prompts = [PromptText(p, req.cue or "Answer:", s) for p, s in zip(req.prompts, starts)]
        texts = list(req.prompts) if req.raw else prompts  # the reader formats typed prompts
        params = SamplingParams(max_tokens=req.max_tokens or 64, temperature=float(req.temperature),
                                stop=tuple(req.stop))
        outs = await self.generator.generate.remote(texts, params)
        if not req.raw:
            outs = [p.reply(o) for p, o in zip(prompts, outs)]
        model = await self.generator.model_id.remote()
        return eor_pb2.GenerateReply(outputs=outs, model=model)
