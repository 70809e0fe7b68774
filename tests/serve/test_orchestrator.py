"""serve/orchestrator.py: the rounds of an Ask, one orchestrator for the in-process pool and the
service. Each round searches a source once per question, makes one call per worker holding the
round's specs with immutable inputs, and carries what a round found to the next; a slow source
holds up only the retrievers that read it."""
from __future__ import annotations

import asyncio
import math
import time

from retrievers.pool import PoolConfig, RetrieverPool

from retrievers.groundwork import Groundwork, PKDocument, RoundRun
from retrievers.reader import CachedReader
from retrievers.sources.base import PAGES, PASSAGES
from retrievers.spec import parse_spec
from retrievers.types import TIMEOUT, Candidate, Context, Failure, QuestionResult, ReaderTokens
from serve.deadline import Deadline
from serve.orchestrator import AskRounds, LocalCrew, RoundInput
from tests.retrievers.fakes import QUESTION, SE_PAGES, WIKI_PASSAGES, FakeEngine, FakeSource
from tests.serve.service_fakes import FakeEncoder
from voter.cascade import Cascade
from voter.decision import Decision
from voter.question_vote import Vote

NEVER = math.inf  # a threshold no vote reaches: every round runs


def first_answer(results, cascade, stage):
    """The voter's decisions: the first candidate's answer, settled only where the cascade ends."""
    return [Decision(Vote(r.candidates[0].retriever, r.candidates[0].answer, 0.5, None), cascade.settled(stage, 0.0),
                     None, 0.0) for r in results]


class CountingEncoder(FakeEncoder):
    texts = 0

    def encode(self, texts, show_progress=False):
        self.texts += len(texts)
        return super().encode(texts)


def _pool(specs):
    engine, enc = FakeEngine(), CountingEncoder()
    se, wiki = FakeSource("SE", SE_PAGES), FakeSource("Wiki", WIKI_PASSAGES)
    return RetrieverPool(PoolConfig(specs=tuple(specs)), {"SE": se, "Wiki": wiki}, enc, CachedReader(engine)), engine


def test_in_process_rounds_search_once_write_pk_once_and_embed_once():
    stages = (("SE@1", "SE@1@CP"), ("SE@RR@10", "PK"), ("HB@RR@10", "Wiki@10"), ("SE@RR@10@CP", "HB@RR@10@CP"))
    plan = [s for st in stages for s in st]
    pool, engine = _pool(plan)
    cascade = Cascade(stages, (NEVER,) * 3)
    (a,) = asyncio.run(AskRounds([QUESTION], cascade, LocalCrew(pool, first_answer, cascade.specs),
                                 pool.config).answer())
    assert a.rounds_run == 4 and a.ran == plan
    assert len(pool.sources["SE"].calls) == 1 and len(pool.sources["Wiki"].calls) == 1
    assert len(engine.calls_of("pk")) == 1
    once, _ = _pool(plan)
    (whole,) = once.run([QUESTION], plan)
    assert [(c.retriever, c.answer, c.context) for c in a.result.candidates] == \
        [(c.retriever, c.answer, c.context) for c in whole.candidates]
    assert pool.reranker.texts == once.reranker.texts  # no chunk embedded twice over the rounds


class Crew:
    """A service-like crew: one worker per spec; the SE search takes `se_s` seconds. Records
    every call."""

    def __init__(self, specs, se_s=0.0):
        self.groups = [((s,), s) for s in specs]
        self.shapes = {"SE": PAGES, "Wiki": PASSAGES}
        self.se_s = se_s
        self.runs: list[RoundInput] = []
        self.called: dict[tuple[str, ...], float] = {}  # specs -> when their worker was called
        self.searches: list[tuple[str, int]] = []

    async def search(self, src, queries, k, deadline):
        self.searches.append((src, k))
        if src == "SE" and self.se_s:
            try:
                await asyncio.wait_for(asyncio.sleep(self.se_s), deadline.left())
            except asyncio.TimeoutError:
                return Failure(TIMEOUT, f"SE search timed out after {deadline.seconds:g} s")
        return [[] for _ in queries]

    async def run(self, worker, round_: RoundInput) -> RoundRun:
        self.runs.append(round_)
        self.called[round_.specs] = time.perf_counter()
        results, found = [], []
        for q, w in zip(round_.questions, round_.work):
            cands = []
            for s in round_.specs:
                failed = [w.failed[src] for src in parse_spec(s).sources if src in w.failed]
                cands.append(Candidate.failed(s, failed[0]) if failed else Candidate(s, f"answer of {s}", Context(s)))
            results.append(QuestionResult(q, tuple(cands)))
            found.append(Groundwork(pk={"": PKDocument(f"pk of {q}", ReaderTokens(1, 1))}) if "PK" in round_.specs
                         else Groundwork())
        return RoundRun(results, found)

    async def decide(self, results, cascade, stage, deadline):
        return first_answer(results, cascade, stage)


def test_one_call_per_worker_per_round_with_what_earlier_rounds_found():
    stages = (("Wiki@10", "PK"), ("SE@1", "HB@RR@10"))
    crew = Crew(["Wiki@10", "SE@1", "PK", "HB@RR@10", "ReFree"])
    rounds = AskRounds(["q1", "q2"], Cascade(stages, (NEVER,)), crew, PoolConfig(), Deadline.after(30.0))
    answers = asyncio.run(rounds.answer())
    assert [a.ran for a in answers] == [["Wiki@10", "PK", "SE@1", "HB@RR@10"]] * 2
    calls = [r.specs for r in crew.runs]  # the round's workers only, each once (PK first: it waits for no search)
    assert sorted(calls[:2]) == [("PK",), ("Wiki@10",)] and sorted(calls[2:]) == [("HB@RR@10",), ("SE@1",)]
    assert sorted(crew.searches) == [("SE", 10), ("Wiki", 20)]  # once each, at the depth of the whole plan (HB)
    by = {r.specs: r for r in crew.runs[2:]}
    hb, se = by[("HB@RR@10",)], by[("SE@1",)]
    assert all(w.pk == {"": PKDocument(f"pk of {q}", ReaderTokens(1, 1))} for q, w in zip(hb.questions, hb.work))
    assert all(set(w.depth) == {"SE", "Wiki"} for w in hb.work)  # HB reads PK and every source
    assert all(w.pk == {} and set(w.depth) == {"SE"} for w in se.work)  # a group is sent only what its members read
    assert len({r.deadline for r in crew.runs}) == 1  # the Ask's one Deadline, in every call


def test_the_rounds_search_every_configured_source_at_the_depth_its_shape_needs():
    """A third source, `News`, shaped like SE (whole pages): `News@1` searches it for one page, but
    the question's plan (HB reads every source) needs SE's page depth, so that is what it gets."""
    crew = Crew(["News@1", "HB@RR@10"])
    crew.shapes = {"SE": PAGES, "Wiki": PASSAGES, "News": PAGES}
    stages = (("News@1",), ("HB@RR@10",))
    asyncio.run(AskRounds(["q"], Cascade(stages, (NEVER,)), crew, PoolConfig(), Deadline.after(30.0)).answer())
    assert crew.searches[0] == ("News", PoolConfig().se_pages)  # round 1 reads News alone, at the plan's depth
    assert sorted(crew.searches) == [("News", 10), ("SE", 10), ("Wiki", 20)]  # once each
    assert [r.specs for r in crew.runs] == [("News@1",), ("HB@RR@10",)]


def test_a_slow_source_holds_up_only_its_readers():
    crew = Crew(["Wiki@10", "SE@1", "ReFree"], se_s=10.0)
    rounds = AskRounds(["q"], Cascade.single_round(["Wiki@10", "SE@1", "ReFree"]), crew, PoolConfig(),
                       Deadline.after(2.0))
    t = time.perf_counter()
    (a,) = asyncio.run(rounds.answer())
    took = time.perf_counter() - t
    assert 0.9 < took < 1.5  # the search gets half the time left; then its readers fail at once
    by = {c.retriever: c for c in a.result.candidates}
    assert by["Wiki@10"].answer and by["ReFree"].answer
    assert by["SE@1"].error_kind == TIMEOUT and "SE search timed out" in by["SE@1"].error
    assert crew.called[("ReFree",)] - t < 0.2 and crew.called[("Wiki@10",)] - t < 0.2  # not held up
    assert crew.called[("SE@1",)] - t > 0.9  # called once its search gave up


def test_the_deadline_and_the_rounds_import_neither_ray_nor_grpc():
    """Core-safe: `eor ask` in-process and the tests use them without a cluster."""
    import subprocess
    import sys
    from pathlib import Path

    code = "import serve.deadline, serve.orchestrator, serve.ensemble, sys; print(' '.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert not {m.split(".")[0] for m in out.stdout.split()} & {"ray", "vllm", "grpc"}


def test_the_stage_loop_imports_nothing_of_the_orchestrator():
    """serve/ensemble.py is the loop the orchestrator calls, never the other way round (no import cycle)."""
    import ast
    from pathlib import Path

    tree = ast.parse((Path(__file__).resolve().parents[2] / "serve" / "ensemble.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m and m.startswith("serve.")}
