"""Merge concurrent reader calls into one engine batch per SamplingParams.

Every `submit(texts, params)` waits in a queue keyed by its params; one worker takes, after
a short wait (`wait_s`), every queued call with the same params (up to `max_prompts`) and
runs them as one blocking `fn(texts, params, n_calls)` on a single engine thread. While the
engine is busy new calls pile up, so under load batches grow by themselves.
"""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

from retrievers.reader import SamplingParams

BatchFn = Callable[[list[str], SamplingParams, int], list[Any]]  # one output per text (Generation)


class MergingBatcher:
    def __init__(self, fn: BatchFn, wait_s: float = 0.02, max_prompts: int = 256):
        self.fn = fn
        self.wait_s = wait_s
        self.max_prompts = max(1, max_prompts)
        self._pending: dict[SamplingParams, list[tuple[list[str], asyncio.Future]]] = {}
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine")
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    async def submit(self, texts: Sequence[str], params: SamplingParams) -> list[Any]:
        texts = list(texts)
        if not texts:
            return []
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._run())
        fut: asyncio.Future = loop.create_future()
        self._pending.setdefault(params, []).append((texts, fut))
        self._wake.set()
        return await fut

    def _take(self) -> tuple[SamplingParams, list[tuple[list[str], asyncio.Future]]]:
        params = next(iter(self._pending))  # oldest params group first
        calls = self._pending.pop(params)
        take, n = [], 0
        while calls and (not take or n + len(calls[0][0]) <= self.max_prompts):
            n += len(calls[0][0])
            take.append(calls.pop(0))
        if calls:
            self._pending[params] = calls  # goes to the back: other params get their turn
        return params, take

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self.wait_s > 0:
                await asyncio.sleep(self.wait_s)
            while self._pending:
                params, take = self._take()
                texts = [t for c in take for t in c[0]]
                try:
                    outs = await loop.run_in_executor(self._executor, self.fn, texts, params, len(take))
                    if len(outs) != len(texts):
                        raise RuntimeError(f"reader returned {len(outs)} outputs for {len(texts)} prompts")
                except Exception as exc:
                    for _, fut in take:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                i = 0
                for call_texts, fut in take:
                    if not fut.done():
                        fut.set_result(outs[i : i + len(call_texts)])
                    i += len(call_texts)
