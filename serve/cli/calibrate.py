"""`eor calibrate`: fit a shipped voter's P(right) lines again on fit-split questions it never saw.

`eor fit` calibrates on its own questions' out-of-fold P: five scorers, each fitted on four fifths
of them, stand in for the one it ships. Here the shipped scorer itself reads new fit questions as
its cascade reads them (round 1 and the preview for every question, a later round for those sent
there: `eor eval --reads cascade`'s reads) and its lines are fitted on those raw P. The layout,
scorer, answers, stops and latency stay the voter's (each threshold is carried to the new line);
only the P each answer carries changes. The eval split is never read here.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, replace

from serve.cli.common import DEFAULT_WEIGHTS, _config, voter_choice
from serve.cli.runs import _read_cascade, _selection

LINE_METHODS = ("platt-per-round", "platt")  # lines a threshold can be carried along (isotonic steps cannot)
MIN_HELD_OUT = 50  # fewer, and two parameters a round are fitted on a handful of answers per round


def voter_questions(saved, selection) -> set[str]:
    """The qids the voter has seen (serve/offline/seen.py); an error where it was not fitted on this
    file, or where `selection` splits the file otherwise than the voter did (its eval split would be
    read as fit questions)."""
    from serve.offline.seen import fitted_on, voter_questions as seen

    extra = saved.provenance.extra
    if not fitted_on(saved, selection.path):
        raise ValueError(f"the voter ({saved.describe()}) was not fitted on {selection.path}: calibrate on the "
                         "question file it was fitted on, so the questions it saw can be left out")
    seed, fraction = extra.get("split_seed", 0), extra.get("fit_fraction", 0.6)
    grouped = extra.get("split_by", "question")
    if (selection.seed, selection.fit_fraction, selection.group_by) != (seed, fraction, grouped):
        raise ValueError(f"--split-seed {selection.seed} --split-by {selection.group_by} splits the file otherwise "
                         f"than the voter's fit did: questions of its eval split would be read; use --split-seed "
                         f"{seed} --split-by {grouped}")
    return seen(saved, selection.path)


def _r(x: float) -> float | None:
    return round(float(x), 4) if math.isfinite(x) else None


def cmd_calibrate(args) -> int:
    import numpy as np

    from serve.builder import make_pool
    from fitting.pool_run import equal_vote, pool_run
    from serve.offline.cascade_reads import round_members
    from serve.offline.dataset import qids_digest, select_questions
    from fitting.replay import cascade_stops
    from serve.paths import eor_home
    from fitting.held_out import held_out, held_out_scores, recalibrate
    from voter.question_vote import build_metrics
    from voter.weights_io import save_weights

    if args.split != "fit":
        raise ValueError(f"calibrate reads fit-split questions only (--split fit); the {args.split} split is "
                         "eor eval's")
    config = _config(args)
    pool = make_pool(config)
    choice = voter_choice(args, pool, config=config)  # a wrong voter file fails before any work
    saved = choice.saved
    selection = _selection(args, saved)
    model = saved.adaptive
    if model is None:
        raise ValueError(f"{choice.describe()} has no answer scorer to calibrate (a voter with rounds: eor fit)")
    if model.calibrator is not None and model.calibrator.method == "isotonic":
        raise ValueError("calibrate fits Platt lines and carries the stop thresholds along them; this voter's "
                         "calibrator is isotonic")
    own = voter_questions(saved, selection)
    questions = [q for q in select_questions(selection) if q.qid not in own]
    if len(questions) < MIN_HELD_OUT:
        raise ValueError(f"{len(questions)} of the selected questions are new to the voter (it has seen "
                         f"{len(own)}); calibrate needs at least {MIN_HELD_OUT}: raise --limit")
    metrics = build_metrics(choice.options, pool.reader)
    rounds = round_members(model.layout, list(model.preview))
    scored, read_by_round = _read_cascade(args, config, pool, selection, questions, rounds,
                                          lambda so_far: cascade_stops(so_far, saved, metrics))
    run = pool_run(scored, list(saved.pool), metrics, equal_vote(list(saved.pool), saved.metrics, saved.pooling))
    held = held_out(run, model)
    before = held_out_scores(held, None, model.calibrator)
    methods = [args.method] if args.method else list(LINE_METHODS)
    cv = {m: held_out_scores(held, m) for m in methods}  # out of fold: each line never saw the answers it scores
    method = min(methods, key=lambda m: (cv[m].log_loss, methods.index(m)))  # a proper score: steadier than ECE
    after = cv[method]
    better = after.log_loss < before.log_loss
    p, _, stage = held.delivered()
    _, got = held.at_stop()  # a question without an answer counts as wrong, as in eval
    new = recalibrate(model, held, method)
    mean_p = {name: _r(float(np.mean([m.confidence(x, int(k)) for x, k in zip(p, stage)]))) if len(p) else None
              for name, m in (("before", model), ("after", new))}
    earlier = model.fit.get("recalibrated")
    record = {"questions": len(scored), "qids_sha256": qids_digest([q for q, _ in scored]),
              "selection": {k: v for k, v in selection.describe().items() if k != "questions_file"},
              "left_out": len(own), "questions_per_round": read_by_round, "method": method,
              "before": _scores(before), "cv_after": _scores(after), "better": better,
              "cv_by_method": {m: _scores(x) for m, x in cv.items()},
              "match": _r(float(np.mean(got))), "mean_confidence_before": mean_p["before"],
              "mean_confidence_after": mean_p["after"], **({"earlier": earlier} if earlier else {})}
    new = replace(new, fit={**model.fit, "recalibrated": record})
    out = save_weights(args.out or eor_home() / DEFAULT_WEIGHTS, replace(saved, adaptive=new))
    doc = {"weights": str(out), "voter": choice.describe(), "recalibrated": replace(saved, adaptive=new).describe(),
           **record, "thresholds": [None if not math.isfinite(t) else round(t, 4) for t in new.thresholds]}
    if args.json:
        print(json.dumps(doc))
        return 0
    print(f"{len(scored)} fit questions the voter never saw ({len(own)} it has seen left out); rounds read "
          f"by {', '.join(map(str, read_by_round))} of them")
    print(f"its answers: Match {record['match']}, mean P(right) {mean_p['before']} as shipped, "
          f"{mean_p['after']} recalibrated")
    print("the answers' P, as shipped / recalibrated (5-fold CV on these questions): "
          f"log loss {_fmt(before.log_loss)} / {_fmt(after.log_loss)}, ECE (10 bins) {_fmt(before.ece)} / "
          f"{_fmt(after.ece)}, Brier {_fmt(before.brier)} / {_fmt(after.brier)}; first replies' log loss "
          f"{_fmt(before.early_log_loss)} / {_fmt(after.early_log_loss)}, ECE {_fmt(before.early_ece)} / "
          f"{_fmt(after.early_ece)}")
    print(f"lines: {method} (log loss " + ", ".join(f"{m} {_fmt(x.log_loss)}" for m, x in cv.items()) + "); "
          + ("better than the shipped lines here" if better else
             "NO better than the shipped lines here by log loss: keep the voter you have"))
    print("the same rounds, answers and stops; thresholds " + ", ".join(
        f"{_fmt(a)} -> {_fmt(b)}" for a, b in zip(model.thresholds, new.thresholds)))
    if saved.fallback is not None and saved.fallback.adaptive is not None:
        print("the single-reader fallback (run where a reader is missing) keeps its own lines")
    print(f"{doc['recalibrated']} written to {out}")
    return 0


def _scores(x) -> dict:
    return {k: _r(v) for k, v in asdict(x).items()}


def _fmt(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{x:.3f}"
