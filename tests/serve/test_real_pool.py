"""The real RetrieverPool (fake sources and engine) through the run log and the voter, so the
fakes used elsewhere cannot drift from what the pool really returns."""
from retrievers.pool import PoolConfig, RetrieverPool
from retrievers.engine import ReaderEngine
from retrievers.reader import CachedReader, PromptText
from retrievers.sources.base import PAGES, PASSAGES
from retrievers.types import Passage
from serve.offline.dataset import Question
from serve.offline.runlog import RunKey, RunLog, run_questions
from voter.decision import vote
from voter.question_vote import MetricOptions, build_metrics, equal_weights


class Source:
    name = "Wiki"
    shape = PASSAGES

    def load(self):
        return self

    def search(self, queries, k):
        return [[Passage(f"w{i}", "France", "Paris is the capital of France.", "Wiki") for i in range(k)]
                for _ in queries]


class BrokenSource(Source):
    name = "SE"
    shape = PAGES

    def search(self, queries, k):
        raise ConnectionError("search API unreachable")


class Reranker:
    def load(self):
        return self


class Engine(ReaderEngine):
    model_id = "fake-rag"

    def format(self, prompt: PromptText) -> str:
        return f"{prompt.body}\n{prompt.cue}"

    def generate(self, prompts, params):
        out = []
        for p in prompts:
            if p.startswith("Generate a background document"):
                out.append("Some say Lyon is the capital.")
            elif "Premise:" in p:
                out.append("neutral")
            else:
                out.append("Paris" if "Paris" in p else "Lyon")
        return out


def test_real_pool_results_survive_the_run_log_and_the_vote(eor_home):
    specs = ("Wiki@2", "SE@1", "PK", "ReFree", "Wiki@1", "Wiki@3")
    pool = RetrieverPool(PoolConfig(specs=specs), {"Wiki": Source(), "SE": BrokenSource()}, Reranker(),
                         CachedReader(Engine()))
    qs = [Question("q1", "d", "what is the capital of france", ("Paris",))]
    key = RunKey.create("/x.jsonl", pool.reader.model_id, pool.specs)
    first = run_questions(pool, qs, RunLog(key), progress=False)
    again = run_questions(pool, qs, RunLog(key), progress=False)  # read back from the log
    for (_, r) in (first[0], again[0]):
        assert r.failed == ["SE@1"] and "search API unreachable" in r.candidates[1].error
        assert [c.answer for c in r.candidates] == ["Paris", "", "Lyon", "Lyon", "Paris", "Paris"]
    assert again[0][1].candidates[2].context.document == "Some say Lyon is the capital."
    saved = equal_weights(list(specs), ["em", "nli"])
    v = vote([again[0][1]], saved, build_metrics(MetricOptions(("em", "nli")), pool.reader))[0]
    assert (v.answer, v.retriever) == ("Paris", "Wiki@2") and v.scores["SE@1"] is None
