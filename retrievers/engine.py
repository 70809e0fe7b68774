"""The reader engine interface: what the reader asks of an LLM engine (vLLM on CPU or GPU,
serve/engine/; a fake in unit tests), declared once, with defaults, in the style of vLLM's
`EngineClient`. An engine overrides the abilities it has; callers read the declared flags
(`continuous`, `reports_logprobs`) and never probe an engine for a method.
"""
from __future__ import annotations

import zlib
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Callable, Sequence

from retrievers.types import ReaderTokens

if TYPE_CHECKING:
    from retrievers.reader import Generation, PromptText, SamplingParams


class ReaderEngine(ABC):
    """One LLM engine. Required: `model_id` and `format`, and one way to generate (`generate`
    for batches, or `agenerate` with `continuous = True`). Everything else has a default."""

    model_id: str  # the model and what changes its outputs (the reader cache's key)

    continuous: bool = False  # True: `agenerate`, one request at a time into the running batch
    # True: every Generation carries its tokens' log-probabilities from the decoding request itself.
    # A cached output without them is then read again, never rescored: re-tokenising an answer's text
    # does not always give back the tokens it was decoded as (measured: up to 15 nats off a token;
    # docs/notes/2026-11-25-logprob-agreement.md)
    reports_logprobs: bool = False

    # Token stats since the engine started, the engine's own counts (`add_tokens`, per request)
    prompt_tokens: int = 0  # prefilled, prefix-cache hits included
    generated_tokens: int = 0  # decoded
    cached_tokens: int = 0  # prompt tokens its prefix cache served

    on_start: Callable[[], None] | None = None  # called once when a lazily started engine starts

    @abstractmethod
    def format(self, prompt: PromptText) -> str:
        """A task prompt as the model's input string (chat template or completion)."""

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> Sequence[Generation | str]:
        """Every prompt in one batched engine call, same order. A `Generation` carries the text,
        its tokens' log-probabilities and the request's token counts (`tokens`); a plain string
        carries neither."""
        raise NotImplementedError(f"{type(self).__name__} batches continuously: call agenerate()")

    async def agenerate(self, prompt: str, params: SamplingParams) -> Generation:
        """One prompt, one engine request, joining the running batch (continuous batching); its
        output, log-probabilities and token counts when it finishes. Cancelling the awaiting
        task aborts the request in the engine: how a missed deadline frees it at once."""
        raise NotImplementedError(f"{type(self).__name__} runs batches: call generate()")

    @property
    def unfinished_requests(self) -> int:
        """Requests the engine holds now, by its own count (an abort reached it when this drops)."""
        return 0

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text as the model's tokenizer splits it. Default: one id per whitespace word."""
        return [[zlib.crc32(w.encode()) for w in t.split()] for t in texts]

    def add_tokens(self, tokens: ReaderTokens) -> None:
        """Count one finished request in the token stats."""
        self.prompt_tokens += tokens.prompt
        self.generated_tokens += tokens.generated
        self.cached_tokens += tokens.cached

    @property
    def dead_error(self) -> BaseException | None:
        """The error that killed the engine, seen with no request running (vLLM's monitor saw
        its core exit); None while it is alive."""
        return None

    def load(self) -> "ReaderEngine":
        """Start the engine (heavy work happens here, not in the constructor)."""
        return self

    def close(self) -> None:
        """Stop the engine's processes now (best effort; an engine may already be down)."""
