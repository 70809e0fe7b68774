"""Health: every reader's counters, which parts answer a ping, where each deployment runs, and
which voter is live. A mixin of the ingress (serve/app/ingress.py), which owns the handles;
grpc.health.v1 probes use `serving` (no pings: a probe has ~1 s)."""
from __future__ import annotations

import asyncio
from typing import Any

from protos import eor_pb2
from serve.app.handles import bounded
from serve.app.placement import placements
from serve.config import source_deployment
from serve.deadline import Deadline

STATS_S = 10.0  # the longest Health waits for a reader's counters


class HealthChecks:
    """Needs the ingress's `reader`, `readers` (deployment name -> handle, the default reader's
    first), `voter`, `generator`, `sources`, `groups` and `pool`."""

    async def _health(self, request, pings: bool = True) -> eor_pb2.HealthReply:
        """`pings`: also ping every retriever actor and source (up to 2 s when one hangs);
        grpc.health.v1 probes skip them (a probe has ~1 s, and a degraded part is no reason
        to take the pod out). The default reader down or silent: NOT_SERVING; another reader down:
        SERVING, "degraded: " and its line in `detail` (its Asks answer from the fallback)."""
        reply = eor_pb2.HealthReply(retrievers=self.pool)
        stats = await self._reader_stats()
        reply.readers.extend(stats.values())
        default = next(iter(stats.values()))
        down = [(name, r.down) for name, r in stats.items() if r.down]
        # Ready while the default reader answers: with another reader down, Asks get the voter's
        # single-reader fallback (degraded answers), so a probe must not take the pod out
        reply.status = eor_pb2.HealthReply.NOT_SERVING if default.down else eor_pb2.HealthReply.SERVING
        reply.detail = ("" if default.down else "degraded: " if down else "") + "; ".join(
            why if name == default.deployment else f"{name}: {why}" for name, why in down)
        reply.model = default.model
        reply.reader_prompts = default.prompts
        reply.reader_cache_hits = default.cache_hits
        reply.reader_engine_calls = default.engine_calls
        reply.reader_engine_prompts = default.engine_prompts
        reply.reader_mean_batch = default.engine_prompts / default.engine_calls if default.engine_calls else 0.0
        reply.reader_prompt_tokens = default.prompt_tokens
        reply.reader_generated_tokens = default.generated_tokens
        reply.reader_cached_tokens = default.cached_tokens
        reply.reader_in_flight = default.in_flight
        if not default.model:  # the default reader did not answer: nothing can be read
            return reply
        if pings:
            reply.unavailable.extend(await self._unavailable())
            reply.placement.extend(await placements(self._parts()))
            reply.index_generations.extend(await self._generations())
        if reply.unavailable and reply.status == eor_pb2.HealthReply.SERVING:
            reply.detail = "; ".join(filter(None, [reply.detail, "degraded: not answering: " + ", ".join(reply.unavailable)]))
        try:
            reply.voter = await asyncio.wait_for(self.voter.weights_source.remote(), STATS_S)
            shared = next((name for name, h in self.readers.items() if h is self.generator), None)
            reply.generator_model = stats[shared].model if shared else \
                await asyncio.wait_for(self.generator.model_id.remote(), STATS_S)
        except Exception as exc:
            reply.status = eor_pb2.HealthReply.NOT_SERVING
            reply.detail = f"voter or generator not answering: {type(exc).__name__}"
        return reply

    async def _reader_stats(self) -> dict[str, eor_pb2.ReaderHealth]:
        """Each reader deployment's counters (Reader.stats), asked at once; one that does not
        answer within STATS_S is `down` with why."""
        async def one(name: str, handle: Any) -> eor_pb2.ReaderHealth:
            try:
                st = await asyncio.wait_for(self._stats(handle), STATS_S)
            except Exception as exc:
                return eor_pb2.ReaderHealth(deployment=name, down=f"reader not answering: {type(exc).__name__}")
            return eor_pb2.ReaderHealth(
                deployment=name, model=st["model"], prompts=st["prompts"], cache_hits=st["cache_hits"],
                engine_calls=st["engine_calls"], engine_prompts=st["engine_prompts"],
                prompt_tokens=st["prompt_tokens"], generated_tokens=st["generated_tokens"],
                cached_tokens=st.get("cached_tokens", 0), in_flight=st.get("in_flight", 0), down=st.get("down") or "")
        found = await asyncio.gather(*[one(name, h) for name, h in self.readers.items()])
        return {r.deployment: r for r in found}

    def _parts(self) -> list[tuple[str, Any]]:
        """Every deployment by name, for Health's placement (one line each)."""
        parts = [*self.readers.items(), ("Voter", self.voter)]
        parts += [("Generator", self.generator)] if all(h is not self.generator for h in self.readers.values()) else []
        parts += [(source_deployment(name), h) for name, h in self.sources.items()]
        parts += [(f"Retrievers_{i} ({', '.join(specs)})", h) for i, (specs, h) in enumerate(self.groups)]
        return parts

    async def _unavailable(self, timeout_s: float = 2.0) -> list[str]:
        """The retriever actors and sources that do not answer a ping within `timeout_s`."""
        parts = [(list(specs), h) for specs, h in self.groups] + [([name], h) for name, h in self.sources.items()]

        async def down(handle: Any) -> bool:
            try:
                await bounded(handle.ping.remote(), Deadline.after(timeout_s))
                return False
            except Exception:
                return True
        dead = await asyncio.gather(*[down(h) for _, h in parts])
        return [name for (names, _), d in zip(parts, dead) if d for name in names]

    async def _generations(self) -> list[str]:
        """The index generation each source serves ("Wiki: 3"), of those that answer in time."""
        async def one(name: str, handle: Any) -> str | None:
            try:
                return f"{name}: {await asyncio.wait_for(handle.generation_served.remote(), STATS_S)}"
            except Exception:
                return None  # not answering: _unavailable names it
        found = await asyncio.gather(*[one(n, h) for n, h in self.sources.items()])
        return [g for g in found if g is not None]

    async def serving(self) -> tuple[bool, str]:
        """For grpc.health.v1: (serving?, why not)."""
        reply = await self._health(eor_pb2.HealthRequest(), pings=False)
        return reply.status == eor_pb2.HealthReply.SERVING, reply.detail

    async def Check(self, request, grpc_context=None):  # noqa: N802 (grpc.health.v1's rpc)
        """grpc.health.v1 through Ray Serve's gRPC proxy (serve/app/grpc_service.py: add_health_servicer);
        the front answers it itself, with the same rules."""
        from grpc_health.v1 import health_pb2

        from serve.app.grpc_service import health_check, health_refusal

        refused = health_refusal(request)
        if refused is None:
            return await health_check(self.serving())
        if grpc_context is not None:
            grpc_context.set_code(refused[0])
            grpc_context.set_details(refused[1])
        return health_pb2.HealthCheckResponse()

    @staticmethod
    async def _stats(handle: Any) -> dict:
        return await handle.stats.remote()
