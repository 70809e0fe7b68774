"""The confidence-aware layout fit and choice on seeded data whose right answers are known: CV
figures, the first reply's price and line, a preview, the choice under the first-reply bound."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fitting.held_out import apply_model
from fitting.layout_choice import anchor_se, candidate_layouts, choose_layout
from fitting.layout_fit import LayoutFit, delivered_ece, fit_layout, fit_model
from fitting.pricing import LatencyModel
from fitting.thresholds import RoundTrace
from tests.fitting.runs import POOL, synthetic_run
from voter.adaptive_model import AdaptiveModel


def test_layout_fit_stops_early_and_beats_the_best_single_on_held_out_questions():
    fit_run, eval_run = synthetic_run(300, seed=0), synthetic_run(200, seed=1)
    latency = LatencyModel(round_overhead_s=1.0, tokens_per_s=100.0)
    acc = {s: float(fit_run.right[:, m].mean()) for m, s in enumerate(POOL)}
    cost = {"A": 100.0, "B": 300.0, "C": 300.0, "D": 300.0}
    layouts = candidate_layouts(list(POOL), acc, cost, firsts=(1,), seconds=(0,))
    assert layouts == [(POOL,), (("A",), ("B", "C", "D"))]
    fits = [fit_layout(fit_run, lay, latency) for lay in layouts]
    best = choose_layout(fits)
    assert best.layout == (("A",), ("B", "C", "D")) and best.first_round_share > 0.5
    # round 1's expected answer time: one round's overhead + A's 100 tokens at 100/s; the whole pool's: 10 s
    assert best.first_reply_s == pytest.approx(2.0) and fits[0].first_reply_s == pytest.approx(11.0)
    model = fit_model(fit_run, best)
    out = apply_model(eval_run, model)
    single = float(eval_run.right[:, 0].mean())
    assert out.right.mean() >= single and (out.stop == 0).mean() > 0.5
    back = AdaptiveModel.from_dict(model.to_dict(POOL), POOL)
    assert back.layout == model.layout and back.thresholds == model.thresholds
    with pytest.raises(ValueError, match="not in the pool"):
        AdaptiveModel.from_dict(model.to_dict(POOL), POOL[:2])


def test_the_ece_a_fit_reports_is_of_the_answers_delivered_each_from_the_round_it_stopped_after():
    """Round 1's P three times as sure as it should be, round 2's a third: one line for every
    round's pick leaves the answers delivered (round 1's sure ones, round 2's rest) off; a line per
    round calibrates them as well as the true P is (the sampling floor at n = 6,000)."""
    rng = np.random.default_rng(0)
    z = rng.normal(0.0, 1.5, (6000, 2))
    true = 1 / (1 + np.exp(-z))
    right = (rng.random(z.shape) < true).astype(float)
    raw = 1 / (1 + np.exp(-np.stack([3 * z[:, 0], z[:, 1] / 3], axis=1)))
    cost = np.tile([1.0, 3.0], (6000, 1))
    none, one_line, per_round = (delivered_ece(RoundTrace(raw, right, cost), m, tolerance=0.02)
                                 for m in (None, "platt", "platt-per-round"))
    assert per_round < 0.02 < 0.025 < one_line < 0.1 < none
    assert delivered_ece(RoundTrace(true, right, cost), None, tolerance=0.02) < 0.02  # the truth: nothing to fix
    assert math.isnan(delivered_ece(RoundTrace(raw[:1], right[:1], cost[:1]), "platt"))


def test_choose_layout_takes_the_cheapest_within_tolerance_of_the_all_kept_vote():
    def fit(layout, cv, latency):
        return LayoutFit(layout, (), cv, cv, 0.0, float(len(layout)), latency, 0.0, [])

    whole = fit((POOL,), 0.536, 32.0)
    lucky = fit((("A",), ("B", "C", "D")), 0.543, 29.0)  # a question ahead of the all-kept vote: noise
    cheap = fit((("A", "B"), ("C", "D")), 0.536, 9.0)
    worse = fit((("A",), ("B",), ("C", "D")), 0.521, 5.0)
    assert choose_layout([whole, lucky, cheap, worse]) is cheap
    assert choose_layout([whole, lucky, cheap, worse], tolerance=0.02) is worse
    assert choose_layout([lucky, worse]) is lucky  # no all-kept layout: anchored on the best
    # several readers: each reader's own all-kept vote is an anchor too; the best of them counts
    mixed = fit((("A", "B", "C", "D", "A~1.5B", "B~1.5B"),), 0.60, 40.0)
    strong_vote = fit((("A~1.5B", "B~1.5B"),), 0.71, 12.0)
    strong_rounds = fit((("A~1.5B",), ("B~1.5B",)), 0.708, 7.3)
    small_rounds = fit((("A",), ("B", "C", "D")), 0.60, 5.0)
    assert choose_layout([mixed, strong_vote, strong_rounds, small_rounds]) is strong_rounds


def test_choose_layout_holds_round_one_to_the_first_reply_bound_where_a_layout_near_the_anchor_can():
    def fit(layout, cv, latency, first):
        return LayoutFit(layout, (), cv, cv, 0.0, float(len(layout)), latency, 0.0, [], first_reply_s=first)

    whole = fit((POOL,), 0.60, 30.0, 30.0)
    slow_start = fit((("A~1.5B",), ("B~1.5B",)), 0.60, 4.0, 1.9)  # the cheapest, but round 1 is slow
    quick_start = fit((("A",), ("A~1.5B",), ("B~1.5B",)), 0.597, 4.6, 0.7)
    quick_but_worse = fit((("A",), ("B",)), 0.55, 1.5, 0.7)
    fits = [whole, slow_start, quick_start, quick_but_worse]
    assert choose_layout(fits) is slow_start  # no bound: least expected latency
    assert choose_layout(fits, first_reply_s=1.4) is quick_start  # the accuracy anchor still rules
    assert choose_layout([whole, slow_start, quick_but_worse], first_reply_s=1.4) is slow_start  # none can: unbound
    # none meets both: the least relative excess. quick_start is 2% over the cap (4.6 / 4.5), slow_start's
    # first reply 36% over its bound (1.9 / 1.4): the quick first reply wins; a cap it misses by more, it loses
    assert choose_layout(fits, first_reply_s=1.4, latency_cap_s=4.5) is quick_start
    assert choose_layout(fits, first_reply_s=1.4, latency_cap_s=3.0) is slow_start


def test_the_early_answer_shares_the_cores_with_the_rest_of_round_one():
    from types import SimpleNamespace

    from fitting.layout_fit import early_answer_work

    work = {"SE@1": 3.0, "SE@1~1.5B": 10.0, "PK~1.5B": 2.0}

    class OneQuestion(SimpleNamespace):
        def __len__(self):
            return 1
    run = OneQuestion(cost=lambda i, rounds: sum(work[s] for r in rounds for s in r))
    assert early_answer_work(run, ["SE@1", "SE@1~1.5B"]).tolist() == [6.0]  # shorter than the rest: twice its own
    assert early_answer_work(run, ["SE@1", "PK~1.5B"]).tolist() == [5.0]  # the rest ends first: both
    assert early_answer_work(run, ["SE@1~1.5B"]).tolist() == [10.0]  # no early answer: the round itself
    # its reader has the cores first (the rest's engine niced): as alone, however long the rest reads
    assert early_answer_work(run, ["SE@1", "SE@1~1.5B"], early_first=True).tolist() == [3.0]
    assert early_answer_work(run, ["SE@1~1.5B"], early_first=True).tolist() == [10.0]


def test_a_round_one_with_an_early_answer_calibrates_it_on_its_own_out_of_fold_line():
    """Round 1 asks A (the default reader) beside B~1.5B: A's vote alone is a stream's first reply.
    The fit gives it a calibration line of its own, from its out-of-fold P, and reports its CV ECE;
    a round 1 of one reader has no early answer (NaN, no line); the eval replays it with its line."""
    from dataclasses import replace

    from fitting.replay import early_answers
    from fitting.layout_fit import fit_record

    names = ("A", "B~1.5B", "C~1.5B", "D~1.5B")
    run = replace(synthetic_run(400, seed=3), pool=names)
    cost = dict(zip(names, (100.0, 300.0, 300.0, 300.0)))
    run = replace(run, cost=lambda i, rounds: sum(cost[s] for s in frozenset().union(*rounds)))
    latency = LatencyModel(round_overhead_s=1.0, tokens_per_s=100.0)
    beside = fit_layout(run, (("A", "B~1.5B"), ("C~1.5B", "D~1.5B")), latency, calibration="platt-per-round")
    alone = fit_layout(run, (("B~1.5B", "C~1.5B"), ("A", "D~1.5B")), latency, calibration="platt-per-round")
    assert beside.calibrator.has_early and 0 <= beside.cv_ece_early < 0.1
    assert not alone.calibrator.has_early and math.isnan(alone.cv_ece_early)
    record = fit_record(beside, [beside, alone], latency, tolerance=0.005, C=1.0, folds=5, seed=0,
                        calibration="platt-per-round")
    assert [("cv_ece_early" in x) for x in record["layouts"]] == [True, False]
    model = fit_model(run, beside)
    early = early_answers(run, model)
    assert early["members"] == ["A"] and len(early["confidence"]) == 400
    assert early["answers"] == [row[0] or "" for row in run.answers]  # A alone answers
    sure = np.array(early["confidence"])  # A is sure exactly when right: its own line keeps that apart
    assert sure[run.right[:, 0] == 1].mean() > 0.8 > 0.2 > sure[run.right[:, 0] == 0].mean()
    assert early_answers(run, fit_model(run, alone)) is None
    # the scorer is trained on the early view too (a view it scores): one more row per question, A's
    from fitting.pool_run import early_views, round_views, scored_views, training_rows

    views, _, _ = round_views(run, beside.layout)
    rows = range(len(run))
    with_early = training_rows(scored_views(views, early_views(run, beside.layout)), run.right, run.pool, rows)[0]
    assert len(with_early) == len(training_rows(views, run.right, run.pool, rows)[0]) + len(run)
    assert scored_views(views, None) is views


def test_questions_without_an_early_answer_carry_no_p_and_count_nowhere():
    """A question whose early members gave no candidate has no first reply: its zeros (P 0, wrong)
    neither fit the early line nor flatter its ECE, as the service and the eval leave it out."""
    from fitting.layout_fit import early_ece
    from fitting.measures import expected_calibration_error

    rng = np.random.default_rng(0)
    n = 200
    p = rng.uniform(0.05, 0.95, (n, 2))
    right = (rng.random((n, 2)) < p).astype(float)
    p_early = rng.uniform(0.05, 0.95, n)
    right_early = (rng.random(n) < 0.5).astype(float)  # P says nothing: badly calibrated
    answered = np.ones(n, dtype=bool)
    answered[:80] = False
    p_early[~answered], right_early[~answered] = 0.0, 0.0  # what picks() gives where there is no candidate
    raw = early_ece(p, right, p_early, right_early, None, answered=answered)
    assert raw == pytest.approx(expected_calibration_error(p_early[answered], right_early[answered]))
    unmasked = early_ece(p, right, p_early, right_early, None)
    assert unmasked < early_ece(p, right, p_early, right_early, None, answered=answered)  # the zeros flattered it
    assert math.isnan(early_ece(p, right, p_early, right_early, None, answered=np.zeros(n, dtype=bool)))


def test_a_preview_keeps_the_layouts_answers_and_figures_and_brings_a_first_reply_of_its_own():
    """A preview (A, the default reader, read beside round 1 and never voted after): the scorer is
    trained on the rounds alone, so the thresholds, CV figures and every answer are the layout's
    without it; its P gets a line of its own; the first reply is its work alone; its work is paid on
    top of the rounds'. The model file keeps it, and a vote over it alone reads its line."""
    from dataclasses import replace

    from fitting.replay import early_answers
    from fitting.layout_fit import early_answer_work, fit_record
    from voter.calibration import EARLY

    names = ("A", "B~1.5B", "C~1.5B", "D~1.5B")
    run = replace(synthetic_run(400, seed=3), pool=names)
    cost = dict(zip(names, (100.0, 300.0, 300.0, 300.0)))
    run = replace(run, cost=lambda i, rounds: sum(cost[s] for s in frozenset().union(*rounds)))
    latency = LatencyModel(round_overhead_s=1.0, tokens_per_s=100.0, early_first=True)  # the 0.5B has the cores first
    layout = (("B~1.5B",), ("C~1.5B", "D~1.5B"))
    plain = fit_layout(run, layout, latency, calibration="platt-per-round")
    seen = fit_layout(run, layout, latency, calibration="platt-per-round", preview=("A",))
    assert (seen.thresholds, seen.cv_accuracy, seen.cv_ece, seen.tokens) == (
        plain.thresholds, plain.cv_accuracy, plain.cv_ece, plain.tokens)
    assert seen.first_reply_s == pytest.approx(1.0 + 100.0 / 100.0) and plain.first_reply_s == pytest.approx(4.0)
    assert seen.latency_s == pytest.approx(plain.latency_s + 1.0)  # A's 100 tokens at 100/s
    assert seen.calibrator.has_early and not plain.calibrator.has_early and math.isfinite(seen.cv_ece_early)
    shared = fit_layout(run, layout, replace(latency, early_first=False), calibration="platt-per-round", preview=("A",))
    assert shared.first_reply_s == pytest.approx(1.0 + 200.0 / 100.0)  # sharing the cores with round 1's 300
    with_preview, without = fit_model(run, seen), fit_model(run, plain)
    assert with_preview.preview == ("A",) and with_preview.cascade.preview == ("A",)
    assert (apply_model(run, with_preview).picked == apply_model(run, without).picked).all()
    assert with_preview.round_of(["A"]) == EARLY and with_preview.round_of(["B~1.5B"]) == 0
    early = early_answers(run, with_preview)
    assert early["members"] == ["A"] and early["answers"] == [row[0] or "" for row in run.answers]
    sure = np.array(early["confidence"])  # A is sure exactly when right: its line keeps that order
    assert sure[run.right[:, 0] == 1].min() > sure[run.right[:, 0] == 0].max()
    back = AdaptiveModel.from_dict(with_preview.to_dict(names), names)
    assert back.preview == ("A",) and back.cascade.asked == ["B~1.5B", "C~1.5B", "D~1.5B", "A"]
    record = fit_record(seen, [plain, seen], latency, tolerance=0.005, C=1.0, folds=5, seed=0,
                        calibration="platt-per-round")
    assert [x.get("preview") for x in record["layouts"]] == [None, ["A"]]
    for bad in (["B~1.5B"], ["E"]):  # a round's member, or none of the pool's
        with pytest.raises(ValueError, match="preview"):
            AdaptiveModel.from_dict(with_preview.to_dict(names) | {"preview": bad}, names)


def test_the_layouts_that_miss_the_first_reply_bound_are_fitted_again_with_a_preview():
    from fitting.layout_choice import acceptable, preview_candidates, quick_member

    def fit(layout, cv, first, preview=()):
        return LayoutFit(layout, (), cv, cv, 0.0, 1.0, 5.0, 1.0, [], first_reply_s=first, preview=preview)
    whole = fit((("A", "B~1.5B", "C~1.5B"),), 0.60, 9.0)
    slow = fit((("B~1.5B",), ("C~1.5B",)), 0.60, 4.0)
    quick = fit((("B~1.5B", "C~1.5B"),), 0.59, 1.0)  # meets the bound already
    worse = fit((("C~1.5B",), ("B~1.5B",)), 0.50, 4.0)  # below the anchor: never chosen
    asks = fit((("A",), ("B~1.5B",)), 0.60, 4.0)  # asks A itself
    fits = [whole, slow, quick, worse, asks]
    assert worse not in acceptable(fits, 0.005) and slow in acceptable(fits, 0.005)
    assert preview_candidates(fits, "A", 0.005, 2.0) == [slow.layout]
    accuracy = {"A": 0.4, "A@CP": 0.5, "B~1.5B": 0.6}
    assert quick_member(list(accuracy), accuracy, {"A": 100.0, "A@CP": 100.0, "B~1.5B": 100.0}) == "A"
    assert quick_member(["B~1.5B"], {"B~1.5B": 0.6}, {"B~1.5B": 1.0}) is None
    # chosen where it alone meets the bound within the cap: the slow layout with its preview
    previewed = fit(slow.layout, 0.60, 2.0, ("A",))
    assert choose_layout([*fits[:2], worse, previewed], 0.005, 2.5, 10.0) is previewed


def test_where_the_bounds_bind_choose_layout_widens_the_target_to_the_anchors_standard_error():
    """The 280-question fit's shape (2026-11-27): the anchor rose, every layout within 0.5 pt of it
    missed the cap; within one standard error (2.8 pt) the most accurate layout that meets both
    bounds is taken, and where none does, the least relative excess among those within it."""
    def fit(layout, cv, latency, first):
        return LayoutFit(layout, (), cv, cv, 0.0, float(len(layout)), latency, 0.0, [], first_reply_s=first)

    whole = fit((POOL,), 0.671, 30.0, 30.0)
    three_rounds = fit((("A~1.5B", "B~1.5B"), ("C~1.5B",), ("D~1.5B",)), 0.668, 14.3, 1.8)
    two_rounds = fit((("A~1.5B",), ("B~1.5B",)), 0.657, 9.2, 4.5)
    two_previewed = fit((("A~1.5B",), ("B~1.5B",)), 0.657, 9.6, 1.8)
    cheaper = fit((("A~1.5B",), ("C~1.5B",)), 0.645, 9.0, 1.8)
    quick_but_poor = fit((("A",), ("B", "A~1.5B")), 0.539, 7.1, 1.8)
    se = anchor_se([whole, three_rounds], 280)
    assert se == pytest.approx((0.671 * 0.329 / 280) ** 0.5)
    bounds = dict(first_reply_s=3.3, latency_cap_s=9.8)
    fits = [whole, three_rounds, two_rounds, quick_but_poor]
    assert choose_layout(fits, **bounds) is three_rounds  # 46% over the cap: the least excess within 0.5 pt
    assert choose_layout(fits, **bounds, widen_to=se) is two_rounds  # its reply 36% over: less than 46%
    assert choose_layout(fits + [cheaper, two_previewed], **bounds, widen_to=se) is two_previewed  # both met, best
    assert choose_layout(fits + [cheaper], **bounds, widen_to=se) is cheaper
    assert choose_layout(fits + [cheaper], **bounds, widen_to=0.004) is three_rounds  # no wider than the tolerance
    met = fit((("A~1.5B", "B~1.5B"), ("C~1.5B",)), 0.669, 9.7, 1.8)
    assert choose_layout(fits + [cheaper, met], **bounds, widen_to=se) is met  # met within 0.5 pt: never widened
