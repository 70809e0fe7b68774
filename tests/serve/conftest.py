"""Fakes for the serving layer: a reader engine and a retriever pool that never start vLLM,
load an index or touch the network; $EOR_HOME in a temporary folder."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Callable, Mapping, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest

from retrievers.engine import ReaderEngine
from retrievers.pool import PoolConfig
from retrievers.groundwork import Groundwork, RoundRun
from retrievers.reader import CachedReader, PromptText, SamplingParams
from retrievers.types import ERROR, TIMEOUT, Candidate, Failure, Context, Passage, QuestionResult
from voter.normalize import normalize_answer

_ANSWER = r"(?:Question: .*? Answer: )?(.*)"


class FakeEngine(ReaderEngine):
    """A ReaderEngine used only as the NLI judge: "entailment" when one normalised answer
    contains the other, "neutral" otherwise."""

    model_id = "fake-reader"

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def format(self, prompt: PromptText) -> str:
        return f"{prompt.body}\n{prompt.cue}"

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[str]:
        self.prompts += list(prompts)
        out = []
        for p in prompts:
            a = normalize_answer(re.search(r"Premise: " + _ANSWER, p).group(1))
            b = normalize_answer(re.search(r"Hypothesis: " + _ANSWER, p).group(1))
            out.append("entailment" if a and b and (a in b or b in a) else "neutral")
        return out


class FakePool:
    """Stands in for RetrieverPool: `answers(question)` -> {spec: answer, or an Exception for
    a failed retriever}. `fail_after=k` raises once k questions have been answered (a crash)."""

    def __init__(self, specs: Sequence[str], answers: Callable[[str], Mapping[str, object]],
                 fail_after: int | None = None):
        self.config = PoolConfig(specs=tuple(specs))
        self.reader = CachedReader(FakeEngine())
        self.other_readers: dict = {}  # name -> reader, for members SPEC~NAME
        self.answers = answers
        self.fail_after = fail_after
        self.calls: list[list[str]] = []
        self.spec_calls: list[list[str]] = []  # the specs each run was asked for
        self.round_calls: list[tuple] = []  # (groundwork, plan specs) each round got
        self.shapes: dict = {}  # no sources: nothing for the rounds to search
        self.loads = 0

    @property
    def specs(self) -> list[str]:
        return list(self.config.specs)

    @property
    def readers(self) -> dict:
        """The pool's readers by name, as RetrieverPool has them ("": the default); a test adds others."""
        return {"": self.reader, **self.other_readers}

    def part(self, reader: str) -> "FakePool":
        """As RetrieverPool.part: the members `reader` reads, as plain specs, it their default reader."""
        from retrievers.spec import parse_spec, split_reader, with_reader

        specs = [split_reader(s)[0] for s in self.specs if parse_spec(s).reader == reader]
        part = FakePool(specs, lambda q: {split_reader(k)[0]: v for k, v in self.answers(q).items()
                                          if parse_spec(k).reader == reader}, self.fail_after)
        part.reader = self.readers[reader]
        return part

    def subset(self, specs: Sequence[str]) -> "FakePool":
        """As RetrieverPool.subset: these members only, the same readers."""
        sub = type(self)([s for s in self.specs if s in set(specs)], self.answers, self.fail_after)
        sub.reader, sub.other_readers = self.reader, self.other_readers
        sub.calls, sub.spec_calls = self.calls, self.spec_calls  # what every round read, in one place
        return sub

    def load(self) -> "FakePool":
        self.loads += 1
        return self

    def run_round(self, questions, specs=None, work=None, documents=None, plan_specs=None) -> RoundRun:
        self.round_calls.append((tuple(work or ()), list(plan_specs or ())))
        results = self.run(questions, specs, documents)
        return RoundRun(results, [Groundwork(read=((f"prompt {len(self.calls)}", "fake"),)) for _ in results])

    def run(self, questions: Sequence[str], specs: Sequence[str] | None = None, documents=None) -> list[QuestionResult]:
        answered = sum(len(c) for c in self.calls)
        if self.fail_after is not None and answered + len(questions) > self.fail_after:
            raise RuntimeError("simulated crash")
        self.calls.append(list(questions))
        self.spec_calls.append(list(specs or self.specs))
        out = []
        for q in questions:
            given = self.answers(q)
            cands = []
            for spec in specs or self.specs:
                a = given[spec]
                if isinstance(a, Exception):
                    kind = TIMEOUT if isinstance(a, TimeoutError) else ERROR
                    cands.append(Candidate.failed(spec, Failure(kind, f"{type(a).__name__}: {a}")))
                elif spec == "PK":
                    cands.append(Candidate(spec, str(a), Context(spec, (), f"background on {q}")))
                else:
                    p = Passage(f"{spec}-p1", f"Title for {spec}", "text", spec.split("@")[0])
                    cands.append(Candidate(spec, str(a), Context(spec, (p,))))
            out.append(QuestionResult(q, tuple(cands)))
        return out


def write_questions(path: Path, rows: Sequence[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def eor_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "eor_home"
    monkeypatch.setenv("EOR_HOME", str(home))
    return home


@pytest.fixture
def use_pool(monkeypatch):
    """use_pool(pool): `eor` commands get this pool from serve.builder.make_pool, in this process
    (a developer's running `eor serve` would otherwise answer `eor ask` instead of the pool, and
    `eor ask` would start a warm reader: a process of its own, with the real pool)."""
    import serve.builder
    import serve.cli.ask

    def install(pool):
        made: list = []  # the configs make_pool was called with, for this pool

        def make_pool(config, engine=None):
            made.append(config)
            return pool

        monkeypatch.setattr(serve.builder, "make_pool", make_pool)
        monkeypatch.setattr(serve.cli.ask, "running_service", lambda args: None)
        monkeypatch.setenv("EOR_KEEP_WARM", "0")
        return made

    return install



@pytest.fixture
def shipped_voter(tmp_path, monkeypatch):
    """shipped_voter(saved): the voter `eor ask` / `eor eval` use by default, for this test."""
    import voter.question_vote
    from voter.weights_io import save_weights

    def install(saved):
        path = save_weights(tmp_path / "shipped_voter.json", saved)
        monkeypatch.setattr(voter.question_vote, "SHIPPED_VOTER", path)
        return path

    return install
