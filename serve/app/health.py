"""Health: the reader's counters, which parts answer a ping, where each deployment runs, and
which voter is live. A mixin of the ingress (serve/app/ingress.py), which owns the handles;
grpc.health.v1 probes use `serving` (no pings: a probe has ~1 s)."""
from __future__ import annotations

import asyncio
from typing import Any

from protos import eor_pb2
from serve.app.handles import bounded
from serve.app.placement import placements, source_deployment
from serve.deadline import Deadline


class HealthChecks:
    """Needs the ingress's `reader`, `voter`, `generator`, `sources`, `groups` and `pool`."""

    async def _health(self, request, pings: bool = True) -> eor_pb2.HealthReply:
        """`pings`: also ping every retriever actor and source (up to 2 s when one hangs);
        grpc.health.v1 probes skip them (a probe has ~1 s, and a degraded part is no reason
        to take the pod out)."""
        reply = eor_pb2.HealthReply(retrievers=self.pool)
        try:
            st = await asyncio.wait_for(self._stats(), 10.0)
        except Exception as exc:
            reply.status = eor_pb2.HealthReply.NOT_SERVING
            reply.detail = f"reader not answering: {type(exc).__name__}"
            return reply
        reply.status = eor_pb2.HealthReply.SERVING
        if st.get("down"):
            reply.status = eor_pb2.HealthReply.NOT_SERVING
            reply.detail = st["down"]
        reply.model = st["model"]
        reply.reader_prompts = st["prompts"]
        reply.reader_cache_hits = st["cache_hits"]
        reply.reader_engine_calls = st["engine_calls"]
        reply.reader_engine_prompts = st["engine_prompts"]
        reply.reader_mean_batch = st["mean_batch"]
        reply.reader_prompt_tokens = st["prompt_tokens"]
        reply.reader_generated_tokens = st["generated_tokens"]
        reply.reader_cached_tokens = st.get("cached_tokens", 0)
        reply.reader_in_flight = st.get("in_flight", 0)
        if pings:
            reply.unavailable.extend(await self._unavailable())
            reply.placement.extend(await placements(self._parts()))
        if reply.unavailable and reply.status == eor_pb2.HealthReply.SERVING:
            reply.detail = "degraded: not answering: " + ", ".join(reply.unavailable)
        try:
            reply.voter = await asyncio.wait_for(self.voter.weights_source.remote(), 10.0)
            reply.generator_model = st["model"] if self.generator is self.reader else \
                await asyncio.wait_for(self.generator.model_id.remote(), 10.0)
        except Exception as exc:
            reply.status = eor_pb2.HealthReply.NOT_SERVING
            reply.detail = f"voter or generator not answering: {type(exc).__name__}"
        return reply

    def _parts(self) -> list[tuple[str, Any]]:
        """Every deployment by name, for Health's placement (one line each)."""
        parts = [("Reader", self.reader), ("Voter", self.voter)]
        parts += [("Generator", self.generator)] if self.generator is not self.reader else []
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

    async def serving(self) -> tuple[bool, str]:
        """For grpc.health.v1: (serving?, why not)."""
        reply = await self._health(eor_pb2.HealthRequest(), pings=False)
        return reply.status == eor_pb2.HealthReply.SERVING, reply.detail

    async def _stats(self) -> dict:
        return await self.reader.stats.remote()
