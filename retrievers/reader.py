"""The reader protocol: one engine for every generation (answers, PK, @CP, NLI judging).

The engine is injected. Core code formats prompts through the engine (chat template or
plain completion) and asks for many prompts at once; `CachedReader` adds the on-disk cache
and in-batch deduplication, so a prompt is never paid for twice.
"""
from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping, NamedTuple, Protocol, Sequence


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
    """One finished completion: its text and the log-probability of each generated token
    (greedy decoding: the chosen token's), read from the same engine request, so the
    reader's confidence costs no extra prompt. `logprobs` is None where the engine reports
    none (test fakes, outputs cached before they were recorded)."""

    text: str
    logprobs: tuple[float, ...] | None = None

    @classmethod
    def of(cls, out: "str | Generation") -> "Generation":
        """An engine's output as a Generation (an engine may return plain strings: no log-probabilities)."""
        return out if isinstance(out, Generation) else cls(out)

    def stripped(self) -> "Generation":
        return Generation(self.text.strip(), self.logprobs)


class Counted(NamedTuple):
    """One answered prompt with what it cost: the output, the prompt's token ids (by the
    model's tokenizer), the tokens generated and their log-probabilities (None: not known)."""

    text: str
    prompt_ids: list[int]
    generated: int
    logprobs: tuple[float, ...] | None = None


def clean_logprobs(values: Sequence[float | None]) -> tuple[float, ...]:
    """Finite floats (vLLM gives -inf for a token outside a truncated distribution: clamp it)."""
    return tuple(max(float(v), -100.0) if v is not None and not math.isnan(v) else -100.0 for v in values)


class ReaderEngine(Protocol):
    """What the core needs from an LLM engine (vLLM on CPU or GPU, or a fake in unit tests)."""

    model_id: str

    def format(self, prompt: PromptText) -> str:
        """Turn a task prompt into the model's input string (chat template or completion)."""

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> "Sequence[Generation | str]":
        """Complete every prompt in one batched engine call; same order as given. A real engine
        returns `Generation`s with their token log-probabilities; a plain string means none."""

    # Optional: `token_ids(texts) -> list[list[int]]` with the model's tokenizer. Without it the
    # reader counts whitespace words as tokens (test fakes).
    # Optional: `score(prompts, outputs) -> list[tuple[float, ...]]`: the log-probabilities of
    # given outputs after their prompts, from a prefill-only pass (outputs cached before their
    # log-probabilities were recorded get them this way, once).


class PromptReader(Protocol):
    """What the pool and the LLM judge call: typed prompts in, outputs out. In-process it is
    `CachedReader`; in a thin retriever actor it is `serve.app.handles.RemoteReader`, which sends
    the prompts as they are to the shared Reader deployment (the one cache and dedup layer)."""

    model_id: str

    def generate(self, prompts: Sequence[PromptText], params: SamplingParams) -> list[str]:
        """One output per prompt, same order."""

    def generate_counted(self, prompts: Sequence[PromptText], params: SamplingParams) -> list[Counted]:
        """Output, prompt token ids, generated tokens and their log-probabilities per prompt, same order."""


@dataclass
class ReaderStats:
    calls: int = 0  # batched calls that reached the engine
    prompts: int = 0  # prompts asked of the reader
    engine_prompts: int = 0  # prompts the engine actually generated
    cache_hits: int = 0


class ReaderCache:
    """SQLite map (model, prompt, sampling params) -> output and its token log-probabilities
    (a second table: caches written before log-probabilities were recorded still load). Safe
    across threads."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS out (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
        self._db.execute("CREATE TABLE IF NOT EXISTS logprobs (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
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
                q = (f"SELECT out.k, out.v, logprobs.v FROM out LEFT JOIN logprobs ON logprobs.k = out.k "
                     f"WHERE out.k IN ({','.join('?' * len(chunk))})")
                for k, v, lp in self._db.execute(q, chunk).fetchall():
                    found[k] = Generation(v, tuple(json.loads(lp)) if lp is not None else None)
        return found

    def put_many(self, items: Mapping[str, "Generation | str"]) -> None:
        gens = {k: Generation.of(g) for k, g in items.items()}
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO out VALUES (?, ?)", [(k, g.text) for k, g in gens.items()])
            self._db.executemany("INSERT OR REPLACE INTO logprobs VALUES (?, ?)",
                                 [(k, json.dumps([round(x, 5) for x in g.logprobs]))
                                  for k, g in gens.items() if g.logprobs is not None])
            self._db.commit()


class CachedReader:
    """Formats, deduplicates and caches prompts in front of an engine; one engine call per batch."""

    def __init__(self, engine: ReaderEngine, cache: ReaderCache | None = None):
        self.engine = engine
        self.cache = cache
        self.stats = ReaderStats()

    @property
    def model_id(self) -> str:
        return self.engine.model_id

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text as the engine's tokenizer splits it (cached outputs too: the cost of a
        retriever is the same whether or not the disk cache answered it)."""
        ids = getattr(self.engine, "token_ids", None)
        if ids is not None:
            return [list(x) for x in ids(texts)] if texts else []
        return [[hash(w) for w in t.split()] for t in texts]

    def generate_counted(self, prompts: Sequence[PromptText], params: SamplingParams) -> list[Counted]:
        """Output, prompt token ids, generated tokens and log-probabilities per prompt."""
        texts = [self.engine.format(p) for p in prompts]
        return self.counted(texts, self.generate_full(texts, params))

    def counted(self, texts: Sequence[str], outs: Sequence[Generation]) -> list[Counted]:
        """What each formatted prompt and its output cost, with the output's log-probabilities."""
        ids = self.token_ids(list(texts) + [o.text for o in outs])
        return [Counted(o.text, ids[i], len(ids[len(texts) + i]), o.logprobs) for i, o in enumerate(outs)]

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
        known = self._scored(keys, texts, known)
        return [known[k] for k in keys]

    def _scored(self, keys: Sequence[str], texts: Sequence[str],
                known: dict[str, Generation]) -> dict[str, Generation]:
        """Cached outputs from before log-probabilities were recorded get them from the
        engine's prefill-only scoring pass (when it has one), once: they are cached after."""
        score = getattr(self.engine, "score", None)
        if score is None:
            return known
        todo = {k: t for k, t in zip(keys, texts) if known[k].logprobs is None and known[k].text}
        if not todo:
            return known
        lps = score(list(todo.values()), [known[k].text for k in todo])
        rescored = {k: Generation(known[k].text, tuple(lp)) for k, lp in zip(todo, lps)}
        if self.cache:
            self.cache.put_many(rescored)
        return {**known, **rescored}


def shared_prefix_blocks(ids: Sequence[int], earlier: Sequence[tuple[Sequence[int], str]],
                         block: int) -> tuple[int, str | None]:
    """(tokens of `ids` a prefix cache can serve after the `earlier` (prompt ids, owner) ran,
    whose prompt it shares them with): the longest common prefix with any of them, in whole
    blocks (vLLM reuses only full KV blocks)."""
    best, owner = 0, None
    for other, who in earlier:
        n = min(len(ids), len(other))
        i = 0
        while i < n and ids[i] == other[i]:
            i += 1
        if i > best:
            best, owner = i, who
    hit = (best // block) * block
    return hit, (owner if hit else None)
