"""A run interrupted and restarted resumes without redoing finished instances."""
from __future__ import annotations

import pytest

from bench.robust import rare, sure
from bench.robust.runner import batches, run_suite
from bench.robust.store import Instance, ResultStore, instance_id
from tests.bench.fakes import ITEMS, FakeClient, keep_all, perturber


def test_instance_ids_are_stable_and_distinct():
    a = instance_id("sure", "q1", "format_json", "golden", 0)
    assert a == instance_id("sure", "q1", "format_json", "golden", 0) == Instance("sure", "q1", "format_json", "golden", 0).id
    others = {instance_id("sure", "q1", "format_json", "noise", 0), instance_id("sure", "q1", "format_json", "golden", 1),
              instance_id("rare", "q1", "format_json", "golden", 0), instance_id("sure", "q2", "format_json", "golden", 0)}
    assert a not in others and len(others) == 4


def test_store_ignores_and_cuts_a_line_cut_short(tmp_path):
    s = ResultStore(tmp_path)
    s.add([{"id": "a", "x": 1}, {"id": "b", "x": 2}])
    with open(s.path, "a") as f:
        f.write('{"id": "c", "x"')  # killed mid-write
    s2 = ResultStore(tmp_path)
    assert s2.done() == {"a", "b"}
    s2.add([{"id": "c", "x": 3}])
    assert ResultStore(tmp_path).done() == {"a", "b", "c"}


def test_batches_are_cut_from_the_full_plan():
    plan = [Instance("s", f"q{i}", p, "v", 0) for p in ("x", "y") for i in range(5)]
    got = batches(plan, lambda i: i.perturbation, 2)
    assert [[i.qid for i in b] for b in got] == [["q0", "q1"], ["q2", "q3"], ["q4"]] * 2


def _sure(client):
    p = perturber({"logic_reverse": "reverse", "format_html": "html"}, client)
    return sure.SureSuite(ITEMS, types=("logic_reverse", "format_html"), perturber=p, preserve=keep_all)


@pytest.mark.parametrize("make", [_sure, lambda c: rare.RareSuite(
    ITEMS, query_perturbations=("shout",), perturber=perturber(
        {"shout": "shout", "no_answer": "drop_answer", "back_translate": "generated"}, c))])
def test_interrupted_run_resumes_without_redoing(tmp_path, make):
    first = FakeClient(fail_on_ask=4)  # Ctrl-C during the 4th AskBatch call
    with pytest.raises(KeyboardInterrupt):
        run_suite(make(first), first, ResultStore(tmp_path), batch_size=3, progress=False)
    done = ResultStore(tmp_path).records()
    n_done = len(done)
    assert n_done == 3 + 1 + 3  # the first three batches (a group of 4 questions: 3 + 1) were saved
    finished = {(r["question"], tuple(r.get("docs") or [r.get("doc")])) for r in done}

    second = FakeClient()
    suite = make(second)
    stats = run_suite(suite, second, ResultStore(tmp_path), batch_size=3, progress=False)
    assert stats.skipped == n_done and stats.ran == stats.planned - n_done
    assert len(second.asked) == stats.planned - n_done  # nothing finished was asked again
    store = ResultStore(tmp_path)
    assert len(store) == stats.planned
    assert all((r["question"], tuple(r.get("docs") or [r.get("doc")])) in finished
               for r in store.records() if r["id"] in {d["id"] for d in done})

    # a third run finds everything done and asks nothing
    third = FakeClient()
    stats3 = run_suite(make(third), third, ResultStore(tmp_path), batch_size=3, progress=False)
    assert stats3.ran == 0 and third.ask_calls == 0


def test_resumed_perturbations_match_a_fresh_run(tmp_path):
    """A batch's texts are perturbed together in the resumed run too, so seeded perturbations
    give every instance the text a fresh run would have given it."""
    from bench.robust import query_level

    def make(c):
        return query_level.QueryLevelSuite(ITEMS, perturbations=("suffix",), variants=2,
                                           perturber=perturber({"suffix": "suffix"}, c))

    fresh = FakeClient()
    run_suite(make(fresh), fresh, ResultStore(tmp_path / "fresh"), batch_size=3, progress=False)
    first = FakeClient(fail_on_ask=4)
    with pytest.raises(KeyboardInterrupt):
        run_suite(make(first), first, ResultStore(tmp_path / "resumed"), batch_size=3, progress=False)
    again = FakeClient()
    run_suite(make(again), again, ResultStore(tmp_path / "resumed"), batch_size=3, progress=False)
    q = lambda d: {r["id"]: r["question"] for r in ResultStore(tmp_path / d).records()}
    assert q("fresh") == q("resumed")
