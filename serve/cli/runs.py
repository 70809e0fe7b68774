"""`eor run`, and the resumable pool run over a question file that fit and eval share."""
from __future__ import annotations

import json
import time

from serve.cli.common import _config


def _selection(args, saved=None):
    """The questions the command reads. The split is grouped by passage unless --split-by says
    otherwise, or `saved` (the voter judged) was fitted on this file: then as that fit split it."""
    from serve.offline.dataset import Selection

    group_by = getattr(args, "split_by", None)
    if group_by is None and saved is not None:
        from serve.offline.seen import fitted_on

        if fitted_on(saved, args.questions):
            group_by = saved.provenance.extra.get("split_by", "question")
    return Selection(args.questions, args.dataset, args.split, args.limit, args.split_seed,
                     group_by=group_by or "passage")


def _run_pool(args, config, pool, selection, questions):
    """(question, result) pairs, resumably (a run log per reader, keyed by file, reader, pool), and the seconds.
    Quiet like `eor ask`: what vLLM and the other libraries print (its worker processes too)
    goes to $EOR_HOME/logs/eor.log unless --verbose, so stdout carries only the command's
    result (`--json`: JSON alone); the engine is stopped before the result is printed."""
    from serve.cli.console import Console
    from serve.builder import close_engines
    from serve.offline.reader_runs import ReaderRuns

    t = time.perf_counter()
    runs = ReaderRuns(config, pool, selection.path)  # one run log per reader the pool's members name
    with Console(verbose=args.verbose) as con:
        try:
            scored = runs.run(questions, args.batch_size, progress=not args.no_progress, stream=con.out)
        finally:  # also when interrupted (Ctrl-C, SIGTERM): the engine's processes go down with it
            close_engines(pool)  # their shutdown messages go to the log too (a later NLI judge starts it again)
    if not scored:
        raise ValueError("the pool accepted none of the selected questions")
    seconds = runs.seconds().values()  # each reader's part: a question's cold seconds are their sum
    timed = [sum(s[q.qid] for s in seconds) for q, _ in scored if all(q.qid in s for s in seconds)]
    args.seconds_per_question = sum(timed) / len(timed) if timed else None  # cold pool seconds, from the run log
    return scored, time.perf_counter() - t


def _read_cascade(args, config, pool, selection, questions, rounds, stops):
    """As _run_pool, but only what the cascade reads (serve/offline/cascade_reads.py): (question,
    result) pairs with the rounds each question reached, and how many questions read each round."""
    from serve.cli.console import Console
    from serve.builder import close_engines
    from serve.offline.cascade_reads import read_cascade

    with Console(verbose=args.verbose) as con:
        try:
            scored, counts = read_cascade(pool, config, selection.path, questions, rounds, stops, args.batch_size,
                                          progress=not args.no_progress, stream=con.out)
        finally:
            close_engines(pool)
    if not scored:
        raise ValueError("the pool accepted none of the selected questions")
    args.seconds_per_question = None  # a round's run log times only the questions that reached it
    return scored, counts


def keep_reads(config, pool, questions_file) -> dict[str, int]:
    """Each reader's run log written to its kept file in reads/: {file name: questions kept}."""
    from serve.offline.kept_reads import keep
    from serve.offline.reader_runs import ReaderRuns

    out = {}
    for log in ReaderRuns(config, pool, questions_file).logs.values():
        path, n = keep(log, questions_file)
        out[path.name] = n
    return out


def cmd_run(args) -> int:
    """Only the pool over the selected questions, into the run log (resumable, no vote): how a
    long fit/eval run grows by steps in the background; `eor fit` / `eor eval` reuse it."""
    from serve.builder import make_pool
    from serve.offline.dataset import select_questions

    config = _config(args)
    selection = _selection(args)
    questions = select_questions(selection)
    pool = make_pool(config)
    try:
        scored, seconds = _run_pool(args, config, pool, selection, questions)
    finally:  # what a stopped step finished is kept too
        kept = keep_reads(config, pool, selection.path) if getattr(args, "keep", False) else None
    doc = {"questions": len(scored), "split": selection.split, "seconds": round(seconds, 1),
           "pool_seconds_per_question": args.seconds_per_question, "kept": kept}
    print(json.dumps(doc) if args.json else
          f"{len(scored)} questions of split {selection.split} in the run log ({seconds:.0f} s this time)")
    return 0

