"""A deterministic stand-in for the service's reader (the `Generator` protocol): replies are
a function of the prompt, and every call is recorded. Tests only."""
from __future__ import annotations

from typing import Callable, Sequence


class FakeReader:
    def __init__(self, reply: Callable[[str], str] | str = ""):
        self.reply = reply if callable(reply) else (lambda prompt: reply)
        self.calls: list[tuple[list[str], int, float]] = []
        self.starts: list[list[str]] = []

    def generate(self, prompts: Sequence[str], max_tokens: int = 128, temperature: float = 0.0,
                 starts: Sequence[str] = ()) -> list[str]:
        """With `starts`, `reply(prompt)` is what the model writes after the start (as the
        service, the output begins with the start)."""
        self.calls.append((list(prompts), max_tokens, temperature))
        self.starts.append(list(starts))
        outs = [self.reply(p) for p in prompts]
        return [f"{s} {o}" if s else o for s, o in zip(starts, outs)] if starts else outs

    @property
    def prompts(self) -> list[str]:
        return [p for call in self.calls for p in call[0]]
