"""The reader: one engine for every generation (answers, PK, @CP, NLI judging).

The engine is injected (retrievers/engine.py: ReaderEngine). Core code formats prompts
through the engine (chat template or plain completion) and asks for many prompts at once;
`CachedReader` adds the on-disk cache and in-batch deduplication, so a prompt is never paid
for twice, and keeps what each output cost, as the engine counted it, beside it.
"""
from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import threading
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Mapping, Protocol, Sequence

from retrievers.engine import ReaderEngine
from retrievers.types import ReaderTokens


@dataclass(frozen=True)
class SamplingParams:
    """Greedy by default: the paper decodes greedily for reproducibility."""

    max_tokens: int = 32
    temperature: float = 0.0
    stop: tuple[str, ...] = ()
    repetition_penalty: float = 1.0  # >1 stops small models looping in long greedy outputs

    def key(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass(frozen=True)
class PromptText:
    """A task prompt before model formatting: the instruction, the cue a base model needs to
    start answering (e.g. "Answer:") and, optionally, the reply's own opening (`start`), put
    where the model's reply begins so that the model continues it rather than choosing how
    to begin (a 0.5B chat model asked to rewrite a question often answers it instead)."""

    body: str
    cue: str = "Answer:"
    start: str = ""

    def reply(self, generated: str) -> str:
        """The whole reply: `start`, then what the model generated after it."""
        if not self.start:
            return generated
        glue = "" if not generated or self.start[-1].isspace() or generated[0] in ",.;:!?)'\"" else " "
        return f"{self.start}{glue}{generated}"


@dataclass(frozen=True)
class Generation:
    """One finished completion: its text, the log-probability of each generated token (greedy
    decoding: the chosen token's) and what the request cost, all read from the same engine
    request, so neither the reader's confidence nor its cost needs another pass. `logprobs`
    is None where the engine reports none (test fakes, outputs cached before they were
    recorded); `tokens` (prompt, generated, prefix-cache hits) is None where the engine
    counted nothing (test fakes, outputs cached before counts were recorded)."""

    text: str
    logprobs: tuple[float, ...] | None = None
    tokens: ReaderTokens | None = None

    @classmethod
    def of(cls, out: "str | Generation") -> "Generation":
        """An engine's output as a Generation (an engine may return plain strings: no log-probabilities)."""
        return out if isinstance(out, Generation) else cls(out)

    def stripped(self) -> "Generation":
        return replace(self, text=self.text.strip())


def clean_logprobs(values: Sequence[float | None]) -> tuple[float, ...]:
    """Finite floats (vLLM gives -inf for a token outside a truncated distribution: clamp it)."""
    return tuple(max(float(v), -100.0) if v is not None and not math.isnan(v) else -100.0 for v in values)


class PromptReader(Protocol):
    """What the pool and the LLM judge call: typed prompts in, outputs out. In-process it is
    `CachedReader`; in a thin retriever actor it is `serve.app.handles.RemoteReader`, which sends
    the prompts as they are to the shared Reader deployment (the one cache and dedup layer)."""

    model_id: str

    def generate(self, prompts: Sequence[PromptText], params: SamplingParams) -> list[str]:
        """One output per prompt, same order."""

    def generate_counted(self, prompts: Sequence[PromptText], params: SamplingParams) -> list[Generation]:
        """One output per prompt, same order, each with its log-probabilities and its `tokens`
        (never None): what it cost when the engine ran it."""


@dataclass
class ReaderStats:
    calls: int = 0  # batched calls that reached the engine
    prompts: int = 0  # prompts asked of the reader
    engine_prompts: int = 0  # prompts the engine actually generated
    cache_hits: int = 0


class ReaderCache:
    """SQLite map (model, prompt, sampling params) -> output, its token log-probabilities and
    what the request cost (the engine's token counts). One table each: caches written before
    log-probabilities or counts were recorded still load. Safe across threads."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS out (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
        self._db.execute("CREATE TABLE IF NOT EXISTS logprobs (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
        self._db.execute("CREATE TABLE IF NOT EXISTS tokens (k TEXT PRIMARY KEY, prompt INTEGER NOT NULL, "
                         "generated INTEGER NOT NULL, cached INTEGER NOT NULL)")
        self._db.commit()

    @staticmethod
    def key(model_id: str, prompt: str, params: SamplingParams) -> str:
        raw = json.dumps([model_id, prompt, params.key()])
        return hashlib.sha256(raw.encode()).hexdigest()

    def get_many(self, keys: Sequence[str]) -> dict[str, Generation]:
        found: dict[str, Generation] = {}
        with self._lock:
            for i in range(0, len(keys), 500):
                chunk = list(keys[i : i + 500])
                q = (f"SELECT out.k, out.v, logprobs.v, tokens.prompt, tokens.generated, tokens.cached FROM out "
                     f"LEFT JOIN logprobs ON logprobs.k = out.k LEFT JOIN tokens ON tokens.k = out.k "
                     f"WHERE out.k IN ({','.join('?' * len(chunk))})")
                for k, v, lp, prompt, generated, cached in self._db.execute(q, chunk).fetchall():
                    found[k] = Generation(v, tuple(json.loads(lp)) if lp is not None else None,
                                          ReaderTokens(prompt, generated, cached) if prompt is not None else None)
        return found

    def put_many(self, items: Mapping[str, "Generation | str"]) -> None:
        gens = {k: Generation.of(g) for k, g in items.items()}
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO out VALUES (?, ?)", [(k, g.text) for k, g in gens.items()])
            self._db.executemany("INSERT OR REPLACE INTO logprobs VALUES (?, ?)",
                                 [(k, json.dumps([round(x, 5) for x in g.logprobs]))
                                  for k, g in gens.items() if g.logprobs is not None])
            self._db.executemany("INSERT OR REPLACE INTO tokens VALUES (?, ?, ?, ?)",
                                 [(k, g.tokens.prompt, g.tokens.generated, g.tokens.cached)
                                  for k, g in gens.items() if g.tokens is not None])
            self._db.commit()


class CachedReader:
    """Formats, deduplicates and caches prompts in front of an engine; one engine call per batch."""

    def __init__(self, engine: ReaderEngine, cache: ReaderCache | None = None):
        if not isinstance(engine, ReaderEngine):
            raise TypeError(f"{type(engine).__name__} does not implement ReaderEngine (retrievers/engine.py)")
        self.engine = engine
        self.cache = cache
        self.stats = ReaderStats()

    @property
    def model_id(self) -> str:
        return self.engine.model_id

    def generate_counted(self, prompts: Sequence[PromptText], params: SamplingParams) -> list[Generation]:
        """Outputs with their log-probabilities and what each cost (`tokens`, never None)."""
        texts = [self.engine.format(p) for p in prompts]
        return self.counted(texts, params, self.generate_full(texts, params))

    def counted(self, texts: Sequence[str], params: SamplingParams, outs: Sequence[Generation]) -> list[Generation]:
        """Each output with what it cost: the engine's own counts, kept with the cached output,
        so a cache hit reports what the prompt cost when it ran. An output without counts (an
        engine that keeps none, as test fakes; a cache written before counts were recorded)
        is counted once by the engine's tokenizer, its prefix-cache hits unknown (0), and
        the counts are cached with it."""
        keys = [ReaderCache.key(self.model_id, t, params) for t in texts]
        todo = {k: (t, o) for k, t, o in zip(keys, texts, outs) if o.tokens is None}
        if not todo:
            return list(outs)
        ids = self.engine.token_ids([t for t, _ in todo.values()] + [o.text for _, o in todo.values()])
        filled = {k: replace(o, tokens=ReaderTokens(len(ids[i]), len(ids[len(todo) + i])))
                  for i, (k, (_, o)) in enumerate(todo.items())}
        if self.cache:
            self.cache.put_many(filled)
        return [filled.get(k, o) for k, o in zip(keys, outs)]

    def generate(self, prompts: Sequence[PromptText], params: SamplingParams) -> list[str]:
        texts = [self.engine.format(p) for p in prompts]
        return self.generate_raw(texts, params)

    def lookup(self, texts: Sequence[str],
               params: SamplingParams) -> tuple[list[str], dict[str, Generation], dict[str, str]]:
        """(cache key per text, the outputs the disk cache knows, the distinct texts it does not
        know by key, in first-seen order); counts the prompts and cache hits."""
        self.stats.prompts += len(texts)
        keys = [ReaderCache.key(self.model_id, t, params) for t in texts]
        known = self.cache.get_many(keys) if self.cache and keys else {}
        if self.engine.reports_logprobs:  # cached before log-probabilities were recorded: read it again
            known = {k: g for k, g in known.items() if g.logprobs is not None or not g.text}
        todo: dict[str, str] = {}
        for k, t in zip(keys, texts):
            if k not in known and k not in todo:
                todo[k] = t
        self.stats.cache_hits += sum(1 for k in keys if k in known)
        return keys, known, todo

    def generate_raw(self, texts: Sequence[str], params: SamplingParams) -> list[str]:
        return [g.text for g in self.generate_full(texts, params)]

    def generate_full(self, texts: Sequence[str], params: SamplingParams) -> list[Generation]:
        """Formatted prompts in, outputs with their log-probabilities out (cache, dedup, one
        engine call for what is new)."""
        if not texts:
            return []
        keys, known, todo = self.lookup(texts, params)
        if todo:
            outs = self.engine.generate(list(todo.values()), params)
            if len(outs) != len(todo):
                raise RuntimeError(f"engine returned {len(outs)} outputs for {len(todo)} prompts")
            fresh = {k: Generation.of(o).stripped() for k, o in zip(todo, outs)}
            self.stats.calls += 1
            self.stats.engine_prompts += len(todo)
            if self.cache:
                self.cache.put_many(fresh)
            known = {**known, **fresh}
        return [known[k] for k in keys]

