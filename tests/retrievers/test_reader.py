"""CachedReader: one engine call per batch, in-batch dedup, the on-disk cache and its key."""
from __future__ import annotations

import threading

import pytest

from retrievers.engine import ReaderEngine
from retrievers.reader import (CachedReader, Generation, PromptText, ReaderCache, ReaderStats, SamplingParams,
                               clean_logprobs)
from retrievers.types import ReaderTokens


class EchoEngine(ReaderEngine):
    """Returns " out:<prompt> " for every prompt (plain strings: no log-probabilities, no token
    counts) and records each call."""

    def __init__(self, model_id: str = "m1", drop: int = 0):
        self.model_id = model_id
        self.drop = drop  # return this many outputs too few
        self.calls: list[tuple[list[str], SamplingParams]] = []

    def format(self, prompt: PromptText) -> str:
        return f"<{prompt.body}|{prompt.cue}>"

    def generate(self, prompts, params):
        self.calls.append((list(prompts), params))
        outs = [f"  out:{p}\n" for p in prompts]
        return outs[: len(outs) - self.drop]


P = SamplingParams(max_tokens=8)


def test_one_engine_call_per_batch_with_duplicates_removed():
    eng = EchoEngine()
    reader = CachedReader(eng)
    outs = reader.generate_raw(["a", "b", "a", "c", "b"], P)
    assert outs == ["out:a", "out:b", "out:a", "out:c", "out:b"]  # stripped, in input order
    assert eng.calls == [(["a", "b", "c"], P)]  # unique prompts, first-seen order, one call
    assert reader.stats == ReaderStats(calls=1, prompts=5, engine_prompts=3, cache_hits=0)


def test_generate_formats_through_the_engine():
    eng = EchoEngine()
    reader = CachedReader(eng)
    outs = reader.generate([PromptText("q1"), PromptText("q2", cue="Document:"), PromptText("q1")], P)
    assert outs == ["out:<q1|Answer:>", "out:<q2|Document:>", "out:<q1|Answer:>"]
    assert eng.calls == [(["<q1|Answer:>", "<q2|Document:>"], P)]
    assert reader.model_id == "m1"


def test_empty_batch_does_not_reach_the_engine():
    eng = EchoEngine()
    reader = CachedReader(eng)
    assert reader.generate([], P) == []
    assert eng.calls == [] and reader.stats.calls == 0


def test_without_a_cache_every_batch_pays_again():
    eng = EchoEngine()
    reader = CachedReader(eng)
    reader.generate_raw(["a"], P)
    reader.generate_raw(["a"], P)
    assert len(eng.calls) == 2 and reader.stats.cache_hits == 0


def test_second_call_is_served_from_the_disk_cache(tmp_path):
    path = tmp_path / "sub" / "reader.sqlite"
    eng = EchoEngine()
    first = CachedReader(eng, ReaderCache(path))
    assert first.generate_raw(["a", "b"], P) == ["out:a", "out:b"]
    assert path.exists()
    assert first.generate_raw(["b", "a", "b"], P) == ["out:b", "out:a", "out:b"]
    assert len(eng.calls) == 1
    assert first.stats == ReaderStats(calls=1, prompts=5, engine_prompts=2, cache_hits=3)

    # a new reader on the same file (a re-run) never pays for them either
    eng2 = EchoEngine()
    again = CachedReader(eng2, ReaderCache(path))
    assert again.generate_raw(["a", "b"], P) == ["out:a", "out:b"]
    assert eng2.calls == [] and again.stats.cache_hits == 2 and again.stats.calls == 0


def test_only_the_missing_prompts_go_to_the_engine(tmp_path):
    eng = EchoEngine()
    reader = CachedReader(eng, ReaderCache(tmp_path / "c.sqlite"))
    reader.generate_raw(["a", "b"], P)
    assert reader.generate_raw(["a", "x", "b", "y", "x"], P) == ["out:a", "out:x", "out:b", "out:y", "out:x"]
    assert eng.calls[1] == (["x", "y"], P)
    assert reader.stats == ReaderStats(calls=2, prompts=7, engine_prompts=4, cache_hits=2)


def test_cache_key_depends_on_model_prompt_and_sampling_params():
    base = ReaderCache.key("m1", "p", SamplingParams())
    assert base == ReaderCache.key("m1", "p", SamplingParams())
    others = [
        ReaderCache.key("m2", "p", SamplingParams()),
        ReaderCache.key("m1", "p ", SamplingParams()),
        ReaderCache.key("m1", "p", SamplingParams(max_tokens=33)),
        ReaderCache.key("m1", "p", SamplingParams(temperature=0.5)),
        ReaderCache.key("m1", "p", SamplingParams(stop=("\n",))),
    ]
    assert len({base, *others}) == 1 + len(others)


def test_cache_entries_are_not_shared_across_models_or_params(tmp_path):
    cache = ReaderCache(tmp_path / "c.sqlite")
    e1, e2 = EchoEngine("m1"), EchoEngine("m2")
    CachedReader(e1, cache).generate_raw(["a"], P)
    CachedReader(e2, cache).generate_raw(["a"], P)  # another model: not a hit
    CachedReader(e1, cache).generate_raw(["a"], SamplingParams(max_tokens=9))  # other params
    assert len(e1.calls) == 2 and len(e2.calls) == 1


def test_wrong_number_of_engine_outputs_is_an_error_and_caches_nothing(tmp_path):
    cache = ReaderCache(tmp_path / "c.sqlite")
    reader = CachedReader(EchoEngine(drop=1), cache)
    with pytest.raises(RuntimeError, match=r"1 outputs for 2 prompts"):
        reader.generate_raw(["a", "b", "a"], P)
    assert cache.get_many([ReaderCache.key("m1", t, P) for t in "ab"]) == {}
    assert reader.stats.calls == 0 and reader.stats.engine_prompts == 0


def test_cache_get_many_beyond_one_sql_chunk(tmp_path):
    cache = ReaderCache(tmp_path / "c.sqlite")
    items = {f"k{i}": f"v{i}" for i in range(1234)}
    cache.put_many(items)
    assert cache.get_many(list(items) + ["missing"]) == {k: Generation(v) for k, v in items.items()}


def test_cache_is_safe_across_threads(tmp_path):
    cache = ReaderCache(tmp_path / "c.sqlite")
    errors = []

    def work(n):
        try:
            for i in range(20):
                cache.put_many({f"{n}-{i}": str(i)})
                assert cache.get_many([f"{n}-{i}"]) == {f"{n}-{i}": Generation(str(i))}
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(cache.get_many([f"{n}-{i}" for n in range(4) for i in range(20)])) == 80


def test_sampling_params_default_to_greedy():
    assert SamplingParams().temperature == 0.0


def test_a_reply_begun_for_the_model_is_the_start_then_what_it_wrote():
    p = PromptText("Rewrite the question.", start="Who wrote hamlet, knowing that")
    assert p.reply("it is a tragedy?") == "Who wrote hamlet, knowing that it is a tragedy?"
    assert p.reply(", a tragedy?") == "Who wrote hamlet, knowing that, a tragedy?"  # no space before punctuation
    assert PromptText("x", start="Tell me ").reply("more") == "Tell me more"
    assert PromptText("x").reply("as generated") == "as generated"


class ScoringEngine(EchoEngine):
    """Returns Generations with their tokens' log-probabilities, as vLLM does."""

    reports_logprobs = True

    def generate(self, prompts, params):
        self.calls.append((list(prompts), params))
        return [Generation(f" out:{p}", (-0.5, -0.25)) for p in prompts]


def test_outputs_carry_their_logprobs_through_the_cache(tmp_path):
    cache = ReaderCache(tmp_path / "c.sqlite")
    first = CachedReader(ScoringEngine(), cache).generate_full(["a", "b"], P)
    assert first == [Generation("out:a", (-0.5, -0.25)), Generation("out:b", (-0.5, -0.25))]
    eng = ScoringEngine()
    again = CachedReader(eng, cache).generate_full(["b", "a"], P)
    assert again == [first[1], first[0]]
    assert eng.calls == []  # cached with their log-probabilities: nothing to do


def test_cached_outputs_without_logprobs_are_read_again_never_rescored(tmp_path):
    """A cache written before log-probabilities were recorded (plain text only) still loads.
    For an engine that reports log-probabilities such an output is a miss: read again once, its
    decode-time log-probabilities cached (a prefill pass over the re-tokenised text is not the
    same numbers: docs/notes/2026-11-25-logprob-agreement.md)."""
    cache = ReaderCache(tmp_path / "c.sqlite")
    cache.put_many({ReaderCache.key("m1", "a", P): "old answer"})  # a string: no log-probabilities
    eng = ScoringEngine()
    reader = CachedReader(eng, cache)
    out = reader.generate_full(["a", "c"], P)
    assert out == [Generation("out:a", (-0.5, -0.25)), Generation("out:c", (-0.5, -0.25))]
    assert eng.calls == [(["a", "c"], P)] and reader.stats.cache_hits == 0
    eng2 = ScoringEngine()
    assert CachedReader(eng2, cache).generate_full(["a"], P) == [Generation("out:a", (-0.5, -0.25))]
    assert eng2.calls == []  # cached now, with them


def test_an_engine_without_logprobs_keeps_using_plain_cached_outputs(tmp_path):
    cache = ReaderCache(tmp_path / "c.sqlite")
    cache.put_many({ReaderCache.key("m1", "a", P): "old answer"})
    eng = EchoEngine()
    assert CachedReader(eng, cache).generate_full(["a"], P) == [Generation("old answer", None)]
    assert eng.calls == []


def test_an_engine_of_plain_strings_gives_no_logprobs():
    out = CachedReader(EchoEngine()).generate_full(["a"], P)
    assert out == [Generation("out:a", None)]
    counted = CachedReader(EchoEngine()).generate_counted([PromptText("q")], P)
    assert counted[0].text == "out:<q|Answer:>" and counted[0].logprobs is None


def test_clean_logprobs_clamps_what_is_not_finite():
    assert clean_logprobs([-0.1, float("-inf"), float("nan"), None]) == (-0.1, -100.0, -100.0, -100.0)


class CountingEchoEngine(EchoEngine):
    """Echoes, with the request's token counts as an engine keeps them (words, 1 cached per prompt);
    records every tokenizer call."""

    def __init__(self):
        super().__init__()
        self.tokenized: list[list[str]] = []

    def generate(self, prompts, params):
        self.calls.append((list(prompts), params))
        return [Generation(f" out:{p}", (-0.5,), ReaderTokens(len(p.split()) + 2, 1, 1)) for p in prompts]

    def token_ids(self, texts):
        self.tokenized.append(list(texts))
        return super().token_ids(texts)


def test_the_engines_token_counts_are_kept_with_the_cached_output(tmp_path):
    """Nothing is tokenised: the counts come from the engine's request, and a cache hit reports
    what the prompt cost when it ran."""
    cache = ReaderCache(tmp_path / "c.sqlite")
    eng = CountingEchoEngine()
    first = CachedReader(eng, cache).generate_counted([PromptText("a b"), PromptText("c")], P)
    assert [g.tokens for g in first] == [ReaderTokens(4, 1, 1), ReaderTokens(3, 1, 1)]
    eng2 = CountingEchoEngine()
    again = CachedReader(eng2, cache).generate_counted([PromptText("c"), PromptText("a b")], P)
    assert again == [first[1], first[0]]
    assert eng2.calls == [] and eng.tokenized == [] and eng2.tokenized == []


def test_outputs_without_counts_are_counted_once_by_the_tokenizer(tmp_path):
    """An engine that keeps no counts (or a cache written before counts were recorded): the
    engine's tokenizer counts prompt and output once, prefix-cache hits unknown (0), and the
    counts are cached with the output."""
    path = tmp_path / "old.sqlite"
    import sqlite3
    db = sqlite3.connect(str(path))  # a cache file of before: outputs and log-probabilities only
    db.execute("CREATE TABLE out (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
    db.execute("CREATE TABLE logprobs (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
    db.execute("INSERT INTO out VALUES (?, ?)", (ReaderCache.key("m1", "<x y|Answer:>", P), "old answer"))
    db.commit()
    db.close()
    eng = CountingEchoEngine()
    out = CachedReader(eng, ReaderCache(path)).generate_counted([PromptText("x y"), PromptText("x y")], P)
    assert out[0] == out[1] == Generation("old answer", None, ReaderTokens(2, 2, 0))
    assert eng.calls == [] and eng.tokenized == [["<x y|Answer:>", "old answer"]]  # once for both
    eng2 = CountingEchoEngine()
    assert CachedReader(eng2, ReaderCache(path)).generate_counted([PromptText("x y")], P) == [out[0]]
    assert eng2.tokenized == []
    plain = CachedReader(EchoEngine()).generate_counted([PromptText("p q r")], P)  # words, by the default tokenizer
    assert plain[0].text == "out:<p q r|Answer:>" and plain[0].tokens == ReaderTokens(3, 3, 0)


def test_an_engine_outside_the_interface_is_refused():
    class Duck:
        model_id = "duck"

        def format(self, prompt):
            return prompt.body

        def generate(self, prompts, params):
            return list(prompts)

    with pytest.raises(TypeError, match="Duck does not implement ReaderEngine"):
        CachedReader(Duck())

