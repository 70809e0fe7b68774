"""Test doubles for the service: a reader engine and knowledge sources that need no model,
no index and almost no CPU (imported inside Ray actors through service.engine_factory /
service.sources_factory); other configured sources (the toy) are built from their config line.

Hooks in the question text: "slow-se" makes the SE search sleep SLOW_S seconds (a retriever
missing its deadline); "crash-se" makes it raise (a broken source); "closedbook": ReFree's
answer leaves out the question's last word (so a voter trusting it alone is wrong), also
after a one-letter typo (the query-level bench's typos: "closed" or "book" survives one).

`make_model_engine`: an engine per reader model (two readers, two engines), each logging the
prompts it is sent under $EOR_HOME, so a test sees which engine read what.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from retrievers.engine import ReaderEngine
from retrievers.reader import Generation, PromptText, SamplingParams
from retrievers.sources.base import PAGES, PASSAGES
from retrievers.types import Passage, ReaderTokens
from tests.retrievers.fakes import SE_PAGES, WIKI_PASSAGES

SLOW_S = 6.0


class FakeServiceEngine(ReaderEngine):
    """Answers by the question's last word (so retrievers mostly agree), ReFree differently;
    judges NLI by string equality; sleeps `EOR_FAKE_ENGINE_DELAY` seconds per batch."""

    model_id = "fake-service-reader"

    def __init__(self, model_id: str = "", log: Path | None = None) -> None:
        self.delay = float(os.environ.get("EOR_FAKE_ENGINE_DELAY", "0"))
        self.model_id = model_id or self.model_id
        self.log = log  # a JSON line per prompt sent (append)

    def format(self, prompt: PromptText) -> str:
        return f"{prompt.body}\n{prompt.cue}{prompt.start}"

    @staticmethod
    def respond(p: str) -> str:
        if p.startswith("Generate a background document"):
            return "A background document about the question. " * 5
        if "Please truthfully summarize" in p:
            return "A short summary of the document."
        if p.startswith("Consider the two passages"):
            a = re.search(r"Premise: (.*)\n", p)
            b = re.search(r"Hypothesis: (.*)\n", p)
            return "entailment" if a and b and a.group(1).split("Answer:")[-1].strip().lower() == \
                b.group(1).split("Answer:")[-1].strip().lower() else "neutral"
        q = re.search(r"with one or few words: (.*)\n", p)
        question = q.group(1) if q else "unknown"
        last = re.sub(r"\W", "", question.split()[-1]) or "none"
        if p.startswith("Please directly answer"):  # ReFree
            return "no idea" if "closed" in question or "book" in question else f"no idea about {last}"
        return f"{last}"

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[Generation]:
        """Counted like vLLM's requests: words for tokens; a prompt's first half "hits the prefix cache"."""
        if self.delay:
            time.sleep(self.delay)
        if self.log is not None:
            with self.log.open("a") as f:
                f.writelines(json.dumps(p) + "\n" for p in prompts)
        outs = []
        for p in prompts:
            text = self.respond(p)
            words = len(p.split())
            outs.append(Generation(text, None, ReaderTokens(words, len(text.split()), words // 2)))
            self.add_tokens(outs[-1].tokens)
        return outs


class FakeSource:
    def __init__(self, name: str, passages: list[Passage], shape: str = PASSAGES):
        self.name = name
        self.passages = passages
        self.shape = shape

    def load(self) -> "FakeSource":
        return self

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        if self.name == "SE":
            if any("crash-se" in q for q in queries):
                raise RuntimeError("simulated search outage")
            if any("slow-se" in q for q in queries):
                time.sleep(SLOW_S)
        return [list(self.passages[:k]) for _ in queries]


class FakeEncoder:
    dim = 16

    def load(self) -> "FakeEncoder":
        return self

    def encode(self, texts: Sequence[str], show_progress: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            seed = int(hashlib.sha1(t.encode()).hexdigest()[:8], 16)
            v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            out[i] = v / np.linalg.norm(v)
        return out


def make_engine(config) -> FakeServiceEngine:
    return FakeServiceEngine()


def engine_log(model: str) -> Path:
    """Where the engine of `model` (make_model_engine) logs its prompts."""
    return Path(os.environ["EOR_HOME"]) / "fake-engines" / f"{model}.jsonl"


def make_model_engine(config) -> FakeServiceEngine:
    """An engine whose model_id is its reader's model (`config.reader`: the reader this engine
    serves), logging each prompt to `engine_log(model)`; every engine start adds a line to
    `engine_log("starts")`."""
    model = config.reader.model
    engine_log(model).parent.mkdir(parents=True, exist_ok=True)
    with engine_log("starts").open("a") as f:
        f.write(json.dumps(model) + "\n")
    return FakeServiceEngine(model, engine_log(model))


def logged(model: str) -> list[str]:
    """The lines `engine_log(model)` holds (prompts, or the starts' models)."""
    path = engine_log(model)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def make_sources(config):
    """Wiki and SE as fakes; any other configured source (the toy) built from its config line."""
    from serve.builder import make_sources as configured

    encoder = FakeEncoder()
    fakes = {"Wiki": FakeSource("Wiki", WIKI_PASSAGES), "SE": FakeSource("SE", SE_PAGES, PAGES)}
    built = configured(config, encoder)
    return {name: fakes.get(name) or built[name] for name in config.index.sources}, encoder
