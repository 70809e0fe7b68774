"""Recalibrating a shipped model on questions it never saw (fitting/held_out.py: held_out,
held_out_scores, recalibrate) and the calibrator pieces it needs (NaN rounds, the inverse)."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from fitting.held_out import apply_model, held_out, held_out_scores, recalibrate
from fitting.layout_fit import fit_layout, fit_model
from fitting.measures import expected_calibration_error, log_loss
from fitting.pricing import LatencyModel
from tests.fitting.runs import POOL, synthetic_run
from voter.adaptive_model import AdaptiveModel
from voter.calibration import EARLY, Calibrator


def overconfident(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """P uniform in (0.05, 0.95), right with chance sigmoid(0.6 logit(P) - 0.8): a calibrator must move it."""
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.05, 0.95, n)
    z = 0.6 * np.log(p / (1 - p)) - 0.8
    return p, (rng.random(n) < 1 / (1 + np.exp(-z))).astype(float)


def test_a_round_a_question_never_reached_is_left_out_of_its_line():
    p, y = overconfident(600, 1)
    grid, right = np.stack([p, p[::-1]], axis=1), np.stack([y, y[::-1]], axis=1)
    grid[::3, 1] = np.nan  # a third never read round 2
    cal = Calibrator("platt-per-round").fit(grid, right)
    alone = Calibrator("platt-per-round").fit(grid[~np.isnan(grid[:, 1])], right[~np.isnan(grid[:, 1])])
    assert cal.rounds_[1] == pytest.approx(alone.rounds_[1], rel=1e-6)  # the same line as without those rows
    assert cal.rounds_[0] != pytest.approx(alone.rounds_[0], rel=1e-3)  # round 1 kept every question
    pe, ye = overconfident(300, 4)
    pe[::4] = np.nan  # first replies not read: left out of the early line, not an error
    with_nan = Calibrator("platt-per-round").fit(grid, right, (pe, ye))
    finite = Calibrator("platt-per-round").fit(grid, right, (pe[np.isfinite(pe)], ye[np.isfinite(pe)]))
    assert with_nan.early_ == pytest.approx(finite.early_, rel=1e-9)
    with pytest.raises(ValueError, match="at least one answer"):
        Calibrator("platt").fit(np.full(4, np.nan), np.ones(4))


@pytest.mark.parametrize("method", ["platt-per-round", "platt"])
def test_raw_undoes_predict_on_every_stage(method):
    p, y = overconfident(500, 2)
    grid = np.stack([p, p], axis=1)
    cal = Calibrator(method).fit(grid, np.stack([y, y[::-1]], axis=1), (p, y))
    for stage in (0, 1, EARLY, None):
        for x in (0.03, 0.3, 0.5, 0.77, 0.99):
            assert cal.raw(cal(x, stage), stage) == pytest.approx(x, abs=1e-9)
    iso = Calibrator("isotonic").fit(p, y)
    with pytest.raises(ValueError, match="isotonic"):
        iso.raw(0.5)
    flat = Calibrator.from_dict({"method": "platt", "a": 0.0, "b": 0.3})
    with pytest.raises(ValueError, match="flat"):
        flat.raw(0.5)


def shifted_run(n: int, seed: int):
    """synthetic_run with A's sure answers right less often than on the fit questions: the same
    scorer's P is now over-confident (the fit split read easier than the eval split, session 31)."""
    run = synthetic_run(n, seed)
    rng = np.random.default_rng(seed + 100)
    flip = (run.right[:, 0] > 0) & (rng.random(n) < 0.35)
    answers = [list(row) for row in run.answers]
    for i in np.flatnonzero(flip):
        answers[i][0] = f"wrong0-{i}"
    right = run.right.copy()
    right[flip, 0] = 0.0
    same = np.array([[[a == b for b in row] for a in row] for row in answers], dtype=np.float64)
    return type(run)(run.pool, answers, right, run.logprobs, same[..., None], run.mask, run.vote, run.cost,
                     run.datasets)


@pytest.fixture(scope="module")
def shipped():
    layout = (("A",), ("B", "C", "D"))
    fit = fit_layout(synthetic_run(300), layout, LatencyModel(tokens_per_s=100.0), calibration="platt-per-round")
    return fit_model(synthetic_run(300), fit)


def test_held_out_reads_a_round_only_where_the_question_reached_it(shipped):
    run = shifted_run(200, 7)
    held = held_out(run, shipped)
    out = apply_model(run, shipped)
    assert np.array_equal(held.stop, out.stop)
    assert np.isfinite(held.p[:, 0]).all()
    assert np.array_equal(np.isfinite(held.p[:, 1]), out.stop == 1)  # round 2: only where it was read
    p, right, stage = held.delivered()
    assert len(p) == 200 and np.array_equal(stage, out.stop) and np.array_equal(right, out.right)
    assert np.isnan(held.p_early).all()  # no preview and no early answer of round 1's own here


def test_recalibrating_keeps_every_stop_and_answer_and_mends_an_overconfident_p(shipped):
    run = shifted_run(400, 11)
    held = held_out(run, shipped)
    new = recalibrate(shipped, held)
    back = AdaptiveModel.from_dict(new.to_dict(POOL), POOL)  # as the voter file holds it
    before, after = apply_model(run, shipped), apply_model(run, back)
    assert np.array_equal(before.stop, after.stop) and np.array_equal(before.picked, after.picked)
    assert new.layout == shipped.layout and new.scorer is shipped.scorer and new.fit == shipped.fit
    assert new.thresholds != shipped.thresholds and new.calibrator.to_dict() != shipped.calibrator.to_dict()
    # over-confident before (the mean P above the share right), calibrated after
    assert before.confidence.mean() > before.right.mean() + 0.1
    assert after.confidence.mean() == pytest.approx(after.right.mean(), abs=0.03)
    was, cv = held_out_scores(held, None, shipped.calibrator), held_out_scores(held, "platt-per-round")
    assert was.ece == pytest.approx(expected_calibration_error(before.confidence, before.right))
    assert was.log_loss == pytest.approx(log_loss(before.confidence, before.right))
    assert was.brier == pytest.approx(np.mean((before.confidence - before.right) ** 2))
    # out of fold, on questions neither line saw: every score better
    assert cv.ece < was.ece / 2 and cv.log_loss < was.log_loss and cv.brier < was.brier
    with pytest.raises(ValueError, match="isotonic"):
        recalibrate(shipped, held, "isotonic")


def test_a_threshold_exactly_met_still_stops_and_a_never_stop_stays_never(shipped):
    """A question whose old P sits exactly on the threshold stops on the new line too (the round
    trip through the inverse is not allowed to move it by float error); +inf is carried as +inf."""
    run = shifted_run(300, 5)
    held = held_out(run, shipped)
    raw = np.unique(held.p[:, 0])
    for x in raw[np.linspace(1, len(raw) - 2, 25).astype(int)]:  # each time one question's own P is the threshold
        exact = replace(shipped, thresholds=(shipped.confidence(float(x), 0),))
        on_it = held_out(run, exact)
        assert on_it.stop[held.p[:, 0] == x].tolist() == [0] * int((held.p[:, 0] == x).sum())
        new = AdaptiveModel.from_dict(recalibrate(exact, on_it).to_dict(POOL), POOL)
        assert np.array_equal(apply_model(run, new).stop, apply_model(run, exact).stop)
    never = replace(shipped, thresholds=(math.inf,))
    assert recalibrate(never, held_out(run, never)).thresholds == (math.inf,)


def test_a_flat_new_line_is_refused_rather_than_stopping_everything(shipped):
    run = synthetic_run(100, 3)
    held = held_out(run, shipped)
    all_right = replace(held, right=np.ones_like(held.right), right_early=np.ones_like(held.right_early))
    with pytest.raises(ValueError, match="flat"):
        recalibrate(shipped, all_right)


def test_a_preview_gets_its_own_line_from_the_new_questions():
    layout = (("A",), ("C", "D"))
    fit = fit_layout(synthetic_run(300), layout, LatencyModel(tokens_per_s=100.0), calibration="platt-per-round",
                     preview=("B",))
    model = fit_model(synthetic_run(300), fit)
    held = held_out(shifted_run(300, 9), model)
    assert np.isfinite(held.p_early).all()  # B answered every question: a first reply with its own P
    new = recalibrate(model, held)
    assert new.calibrator.has_early and new.calibrator.early_ != model.calibrator.early_
    was, cv = held_out_scores(held, None, model.calibrator), held_out_scores(held, "platt-per-round")
    assert all(math.isfinite(x) for x in (was.early_ece, was.early_log_loss, cv.early_ece, cv.early_log_loss))
    first_p = [model.confidence(x, EARLY) for x in held.p_early]
    assert was.early_log_loss == pytest.approx(log_loss(first_p, held.right_early))
