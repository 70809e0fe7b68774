"""The perturbation protocol (TextAttack-style transformations, batch-first).

A perturbation maps a batch of texts to a batch of perturbed texts. It is seeded: the same
(texts, seed, context) gives the same output, so a resumed run rebuilds identical
instances. Perturbations that need the LLM take a `Generator` (the live service's
`Generate` rpc, through `bench.robust.client.BenchClient`) and send the whole batch in one
call. `context` carries per-text extras some perturbations need (the question, the gold
answers), one dict per text.

    typo = get("typo", rate=0.10)
    out = typo.apply(["who wrote hamlet"], seed=0)
    both = Compose([get("typo"), get("char_delete")])
"""
from __future__ import annotations

import random
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable


@runtime_checkable
class Generator(Protocol):
    """Text generation by the live system's reader (the bench's only LLM)."""

    def generate(self, prompts: Sequence[str], max_tokens: int = 128, temperature: float = 0.0) -> list[str]: ...


class Perturbation:
    """Base class: subclasses set `name` and implement `perturb_batch` (or `perturb_one`)."""

    name: str = ""
    #: "query" or "document": what the perturbation is meant for
    target: str = "query"

    def apply(self, texts: Sequence[str], seed: int = 0,
              context: Sequence[Mapping[str, Any]] | None = None) -> list[str]:
        if isinstance(texts, str):
            raise TypeError("apply() takes a list of texts, not one string")
        ctx = list(context) if context is not None else [{} for _ in texts]
        if len(ctx) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(ctx)} contexts")
        return self.perturb_batch(list(texts), seed, ctx)

    def perturb_batch(self, texts: list[str], seed: int, context: list[Mapping[str, Any]]) -> list[str]:
        # one rng per text, derived from (seed, position): a text's output doesn't depend on
        # which other texts share its batch
        return [self.perturb_one(t, random.Random(f"{self.name}:{seed}:{i}"), c)
                for i, (t, c) in enumerate(zip(texts, context))]

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
        for i, step in enumerate(self.steps):
            texts = step.perturb_batch(texts, seed * 1000 + i, context)
        return texts


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
