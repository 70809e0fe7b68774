"""The perturbation protocol (TextAttack-style transformations, batch-first).

A perturbation maps a batch of texts to a batch of perturbed texts. It is seeded: the same
(texts, seed, context) gives the same output, so a resumed run rebuilds identical
instances. Perturbations that need the LLM take a `Generator` (the live service's
`Generate` rpc, through `bench.robust.client.BenchClient`) and send the whole batch in one
call. `context` carries per-text extras some perturbations need (the question, the gold
answers), one dict per text.

    typo = get("typo", rate=0.10)
    out = typo.apply(["who wrote hamlet"], seed=0)
    both = Compose([get("formal", generator=client), get("typo", rate=0.10)])

A perturbation that cannot change a text (an LLM answer with nothing usable in it, a query
with no word it may touch, a document with no answer sentence) returns it unchanged and says
so in `last_fallbacks`, one flag per text of the last `apply()`, so a report can count them.
"""
from __future__ import annotations

import random
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

#: the service takes at most this many prompts per Generate (serve's `max_prompts`)
MAX_PROMPTS = 64


@runtime_checkable
class Generator(Protocol):
    """Text generation by the live system's reader (the bench's only LLM). `starts` (optional,
    one per prompt): the reply's opening, given to the model; each output begins with it."""

    def generate(self, prompts: Sequence[str], max_tokens: int = 128, temperature: float = 0.0,
                 starts: Sequence[str] = ()) -> list[str]: ...


class NotApplicable(Exception):
    """Raised by `perturb_one`: this text can't be perturbed; it is kept and flagged."""


class Perturbation:
    """Base class: subclasses set `name` and implement `perturb_batch` (or `perturb_one`).

    Not thread-safe: `last_fallbacks` belongs to the last `apply()` of this instance.
    """

    name: str = ""
    #: "query" or "document": what the perturbation is meant for
    target: str = "query"
    #: per text of the last apply(): True where the text came back unchanged because the
    #: perturbation could not be applied (see the module docstring)
    last_fallbacks: list[bool] = []

    def apply(self, texts: Sequence[str], seed: int = 0,
              context: Sequence[Mapping[str, Any]] | None = None) -> list[str]:
        if isinstance(texts, str):
            raise TypeError("apply() takes a list of texts, not one string")
        ctx = list(context) if context is not None else [{} for _ in texts]
        if len(ctx) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(ctx)} contexts")
        self.last_fallbacks = [False] * len(texts)
        return self.perturb_batch(list(texts), seed, ctx)

    def perturb_batch(self, texts: list[str], seed: int, context: list[Mapping[str, Any]]) -> list[str]:
        # one rng per text, derived from (seed, position): a text's output doesn't depend on
        # which other texts share its batch
        out, flags = [], []
        for i, (t, c) in enumerate(zip(texts, context)):
            try:
                out.append(self.perturb_one(t, random.Random(f"{self.name}:{seed}:{i}"), c))
                flags.append(False)
            except NotApplicable:
                out.append(t)
                flags.append(True)
        self.last_fallbacks = flags
        return out

    def perturb_one(self, text: str, rng: random.Random, context: Mapping[str, Any]) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class Compose(Perturbation):
    """Apply perturbations in order (each with a seed derived from the composed seed)."""

    def __init__(self, steps: Sequence[Perturbation]):
        if not steps:
            raise ValueError("Compose needs at least one perturbation")
        self.steps = list(steps)
        self.name = "+".join(s.name for s in self.steps)
        self.target = self.steps[0].target

    def perturb_batch(self, texts, seed, context):
        flags = [False] * len(texts)
        for i, step in enumerate(self.steps):
            step.last_fallbacks = [False] * len(texts)
            texts = step.perturb_batch(texts, seed * 1000 + i, context)
            flags = [a or b for a, b in zip(flags, step.last_fallbacks)]
        self.last_fallbacks = flags
        return texts


class LLMPerturbation(Perturbation):
    """A perturbation written by the live service's reader (`generator`): the whole batch's
    prompts go out in one Generate call (chunks of MAX_PROMPTS), greedy by default, so the
    output is a function of the prompt and the service's cache makes re-runs free."""

    max_tokens: int = 256

    def __init__(self, generator: Generator | None = None, max_tokens: int | None = None,
                 temperature: float = 0.0):
        self.generator = generator
        if max_tokens is not None:
            self.max_tokens = max_tokens
        self.temperature = temperature

    def generate(self, prompts: Sequence[str], max_tokens: int | None = None,
                 starts: Sequence[str] = ()) -> list[str]:
        if self.generator is None:
            raise ValueError(f"perturbation {self.name!r} needs generator= (the service's reader)")
        n = max_tokens or self.max_tokens
        outs: list[str] = []
        for i in range(0, len(prompts), MAX_PROMPTS):
            extra = {"starts": list(starts[i:i + MAX_PROMPTS])} if starts else {}
            outs += self.generator.generate(list(prompts[i:i + MAX_PROMPTS]), max_tokens=n,
                                            temperature=self.temperature, **extra)
        if len(outs) != len(prompts):
            raise RuntimeError(f"generator returned {len(outs)} outputs for {len(prompts)} prompts")
        return [o or "" for o in outs]


_REGISTRY: dict[str, Callable[..., Perturbation]] = {}


def register(name: str) -> Callable[[type], type]:
    """Class decorator: `@register("typo")` makes `get("typo", **kwargs)` build it."""
    def deco(cls: type) -> type:
        if name in _REGISTRY:
            raise ValueError(f"perturbation {name!r} registered twice")
        cls.name = name
        _REGISTRY[name] = cls
        return cls
    return deco


def _load_all() -> None:
    # importing the modules registers their classes (lazy: TextAttack loads only when used)
    import importlib
    import pkgutil

    import bench.robust.perturb as pkg

    for m in pkgutil.iter_modules(pkg.__path__):
        if m.name != "base":
            importlib.import_module(f"bench.robust.perturb.{m.name}")


def get(name: str, **kwargs: Any) -> Perturbation:
    _load_all()
    if name not in _REGISTRY:
        raise KeyError(f"no perturbation {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name](**kwargs)


def names() -> list[str]:
    _load_all()
    return sorted(_REGISTRY)
