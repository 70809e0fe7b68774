"""`eor eval`: EoR against every single retriever on the eval split, per dataset."""
from __future__ import annotations

import json
from pathlib import Path

from serve.cli.common import DEFAULT_EVAL_DIR, _config, voter_choice
from serve.cli.runs import _read_cascade, _run_pool, _selection


def cmd_eval(args) -> int:
    from serve.builder import make_pool
    from serve.offline.dataset import select_questions
    import math

    from serve.offline.cascade_reads import round_members
    from fitting.evaluation import (confidence_report, evaluate, format_confidence, format_table, question_records,
                                    report_dict)
    from fitting.replay import cascade_stops, per_system, replay_ensembles
    from serve.paths import eor_home
    from serve.offline.plots import cost_accuracy_plot, reliability_plot, rwr_heatmap, safe_name, weights_plot
    from voter.question_vote import build_metrics
    from serve.offline.seen import refuse_seen

    config = _config(args)
    pool = make_pool(config)
    if args.baseline and args.baseline not in pool.specs:
        raise ValueError(f"--baseline {args.baseline!r} is not in the pool ({len(pool.specs)} members)")
    choice = voter_choice(args, pool, config=config)  # a wrong voter file fails before any work
    saved, options, source = choice.saved, choice.options, choice.source
    selection = _selection(args, saved)  # a voter fitted on this file: split as its fit was
    questions = select_questions(selection)
    refuse_seen(saved, selection, questions)  # a voter is judged only on questions it never saw
    baseline = args.baseline or saved.provenance.extra.get("best_single")  # the fit split's (eor fit records it)
    baseline = baseline if baseline in pool.specs else None
    metrics = build_metrics(options, pool.reader)
    whole_pool = args.reads == "pool"
    if whole_pool:
        scored, _ = _run_pool(args, config, pool, selection, questions)
        singles, read_by_round = pool.specs, None
    else:
        if saved.adaptive is None:
            raise ValueError(f"--reads cascade needs a voter with rounds (eor-voter/3 or later); {choice.describe()} "
                             "has none: read the whole pool (the default)")
        beside = [*([baseline] if baseline else []), *(s for s in saved.adaptive.preview if s != baseline)]
        rounds = round_members(saved.adaptive.layout, beside)  # the baseline and the preview: every question
        scored, read_by_round = _read_cascade(args, config, pool, selection, questions, rounds,
                                              lambda so_far: cascade_stops(so_far, saved, metrics))
        singles = [s for s in pool.specs if s in rounds[0]]  # the members every question read
    runs = replay_ensembles(scored, saved, metrics, whole_pool=whole_pool)
    reports = evaluate(scored, runs.answers, singles, runs.tokens, baseline=baseline)
    out_dir = Path(args.out_dir) if args.out_dir else eor_home() / DEFAULT_EVAL_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = [str(rwr_heatmap(r.rwr, r.rwr_labels, f"RWR, {r.dataset} (n={r.n}, Match)",
                             out_dir / f"rwr_{safe_name(r.dataset)}.png")) for r in reports]
    plots.append(str(weights_plot(saved, f"retriever weights ({source})", out_dir / "retriever_weights.png")))
    whole = reports[-1]
    costs = {s: (whole.systems[s].tokens.computed, whole.systems[s].match)
             for s in singles if whole.systems[s].tokens is not None}
    if runs.sweep:
        plots.append(str(cost_accuracy_plot(runs.sweep, costs, f"adaptive EoR, {whole.dataset} (n={whole.n})",
                                            out_dir / "match_vs_tokens.png")))
    sure = confidence_report(scored, runs, whole.best_single)
    if sure["ece"] is not None:
        plots.append(str(reliability_plot(sure["reliability"], sure["ece"],
                                          f"EoR's P(right) ({sure['confidence_kind']}), {whole.dataset} (n={whole.n})",
                                          out_dir / "reliability.png")))
    doc = report_dict(reports, saved, source, plots, selection.describe())
    doc["voter"] = choice.describe()
    doc["reader"] = pool.reader.model_id
    doc["readers"] = {name: r.model_id for name, r in pool.readers.items()}
    doc["pool_seconds_per_question"] = args.seconds_per_question
    doc["reads"] = {"what": args.reads, "questions_per_round": read_by_round}  # read_by_round: None, every round all
    doc["confidence"] = sure
    if len(reports) > 1:  # each dataset's own reliability and risk-coverage (NQ's is issue 36's figure)
        doc["confidence_by_dataset"] = {r.dataset: confidence_report(
            scored, runs, r.best_single, [i for i, (q, _) in enumerate(scored) if q.dataset == r.dataset])
            for r in reports[:-1]}
    systems = per_system(scored, runs, singles)  # words per answer and tokens per reader of each system
    doc["words_per_answer"] = systems["EoR"]["words_per_answer"]
    doc["systems"] = systems
    mean_rounds = sum((k + 1) * rate for k, rate in enumerate(runs.stop_rate))
    doc["cascade"] = {"stages": runs.rounds, "mean_rounds": round(mean_rounds, 4), "thresholds": [None if not math.isfinite(t) else t
                                                            for t in saved.cascade_to_run.thresholds],
                      "stop_rate": runs.stop_rate, "threshold_sweep": [
                          {**p, "scale": None if not math.isfinite(p["scale"]) else p["scale"]} for p in runs.sweep]}
    (out_dir / "eval.json").write_text(json.dumps(doc, indent=2) + "\n")
    with open(out_dir / "questions.jsonl", "w", encoding="utf-8") as f:  # each question's answers and scores
        f.writelines(json.dumps(r) + "\n" for r in question_records(scored, runs.answers, singles))
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"voter: {choice.describe()}; metrics {','.join(saved.metrics)}; correctness: Match on whole tokens "
              "(substr: BERGEN's substring Match, beside)")
        for r in reports:
            print(format_table(r))
        print("adaptive EoR stops after stage: " + ", ".join(
            f"{k + 1} ({'+'.join(st)}) {rate:.0%}" for k, (st, rate) in enumerate(zip(runs.rounds, runs.stop_rate)))
              + f"; {mean_rounds:.2f} rounds per question")
        if runs.sweep:
            print("threshold sweep (scale: Match, tokens computed per question): " + "; ".join(
                f"{'inf' if not math.isfinite(p['scale']) else format(p['scale'], 'g')}: {p['match']:.3f}, "
                f"{p['computed_tokens']:.0f}" for p in runs.sweep))
        else:
            print("read as the cascade reads: questions reading each round " + ", ".join(map(str, read_by_round))
                  + " (no threshold sweep, no EoR pruned or EoR-all rows: what they need was not read)")
        print(format_confidence(sure))
        print("words per answer, reader tokens computed per question (by reader): " + "; ".join(
            f"{n} {systems[n]['words_per_answer']}, {systems[n]['tokens_by_reader']}"
            for n in ("EoR", "EoR pruned", "EoR-all equal") if n in systems))
        print(f"plots and eval.json in {out_dir}")
    return 0

