"""What every eor command shares: quiet library logs, the config, the voter choice and how
one question's result is printed or turned into JSON."""
from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

from retrievers.types import QuestionResult

if TYPE_CHECKING:
    from voter.question_vote import Vote

EXAMPLE_QUESTION = "who painted the mona lisa"
DEFAULT_WEIGHTS = "weights/voter.json"  # under $EOR_HOME
DEFAULT_EVAL_DIR = "eval"  # under $EOR_HOME


def _quiet_logs() -> None:
    """vLLM and transformers are chatty; keep stdout for results unless asked otherwise."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


def stop_on_sigterm() -> None:
    """SIGTERM (systemd, Kubernetes, `kill`) stops any command like Ctrl-C: `eor serve`'s Ray,
    its actors and `eor run`'s or `eor ask`'s vLLM engine go down with it instead of being
    orphaned (a killed `eor run` left its EngineCore holding the model's memory). A
    backgrounded process ignores SIGINT, so SIGINT is re-enabled too. Only the main thread
    may set handlers (a CLI called from another thread keeps the ones it has)."""
    import signal
    import threading

    def stop(signum, frame):
        raise KeyboardInterrupt
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def open_files_to_hard_limit() -> int:
    """Raise this process's open-file limit to the hard one, as Ray does in its workers: a dense index is read
    by row from two files a shard (passages, vectors: 524 at 1M), opened as rows are asked, and a common soft
    limit of 1,024 would fail a search at ~2M passages. Returns the limit now."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):  # an infinite hard limit some kernels refuse as a soft one: kept as it is
            return soft
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _config(args):
    from serve.config import load_config

    overrides = {"reader": {"model": getattr(args, "model", None)},
                 "index": {"name": getattr(args, "index", None)}}
    return load_config(getattr(args, "config", None), overrides)


def _fmt_score(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def result_to_dict(result: QuestionResult, vote: "Vote | None" = None) -> dict:
    """One question as JSON: the voted answer first (when voted), then every candidate."""
    from serve.offline.results_io import candidate_to_dict

    head: dict = {"question": result.question}
    if vote is not None:
        head.update(answer=vote.answer, retriever=vote.retriever, score=vote.score, margin=vote.margin)
    cands = [candidate_to_dict(c, **({"score": vote.scores.get(c.retriever)} if vote is not None else {}))
             for c in result.candidates]
    return {**head, "candidates": cands, "failed": result.failed}


def print_result(result: QuestionResult, vote: "Vote | None" = None) -> None:
    print(f"Q: {result.question}")
    if vote is not None:
        if vote.retriever is None:
            print("A: (no retriever answered)")
        else:
            margin = "none (no other answer)" if vote.margin is None else f"{vote.margin:.3f}"
            print(f"A: {vote.answer}")
            print(f"   from {vote.retriever}, score {_fmt_score(vote.score)}, margin {margin}")
    for c in result.candidates:
        if c.error:
            print(f"  {c.retriever:<20} FAILED: {c.error}")
            continue
        used = ", ".join(p.title or p.pid for p in c.context.passages[:4])
        more = f" +{len(c.context.passages) - 4}" if len(c.context.passages) > 4 else ""
        score = f"{_fmt_score(vote.scores.get(c.retriever)):>6}  " if vote is not None else ""
        print(f"  {c.retriever:<20} {score}{c.answer}")
        if used:
            print(f"  {'':<20}   [{used}{more}]")


def voter_choice(args, pool, con=None, config=None):
    """The voter for this command (voter/question_vote.py: choose_voter): the flags, else the config's
    `voter:` section; warnings go to stderr."""
    from serve.builder import pool_reader_models
    from voter.question_vote import choose_voter

    vc = config.voter if config is not None else None
    weights = getattr(args, "weights", None) or (vc.weights if vc else "") or None
    equal = getattr(args, "equal_weights", False) or weights == "equal"
    metrics = args.metrics or (",".join(vc.metrics) if vc and equal else None)
    pooling = args.pooling or (vc.pooling if vc else None) or "mean"
    choice = choose_voter(pool.specs, pool_reader_models(pool), weights=None if equal else weights,
                          equal=equal, metrics=metrics, nli_model=args.nli_model, pooling=pooling)
    for w in choice.warnings:
        if con is not None:
            con.warn(w)
        else:
            print(f"eor: warning: {w}", file=sys.stderr)
    return choice

