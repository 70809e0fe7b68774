"""`eor ask`: questions through the pool in this process (the voter's cascade), or through a
running `eor serve` with --server."""
from __future__ import annotations

import json
import sys
import time

from retrievers.spec import parse_spec
from serve.cli.common import _config, _fmt_score, print_result, result_to_dict, voter_choice


def _provisional_line(stage: int, stages: int, answer: str, retriever: str | None, score: float | None) -> str:
    when = f"after stage {stage}/{stages}" if stage else f"early in stage 1/{stages}"
    return (f"{when}: provisional answer {answer!r} from {retriever or '-'} "
            f"(score {_fmt_score(score)}); asking more retrievers")


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
            if len(args.question) == 1:  # progressive: a line per round that left it open, then the answer
                replies = []
                for r in client.ask_stream(args.question[0], specs):
                    if r.final:
                        replies.append(r)
                    elif not args.json:
                        print(_provisional_line(r.stopped_at_stage, r.stages, r.answer, r.retriever,
                                                r.score if r.HasField("score") else None), file=sys.stderr, flush=True)
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


def running_service(args) -> str | None:
    """The address of a local `eor serve` that is up (grpc.health SERVING), where this ask's
    config says it listens; None when there is none, or when the options ask for what only an
    in-process ask does (another voter, reader or index than the server's, --verbose)."""
    if args.local or args.weights or args.equal_weights or args.model or args.index or args.verbose:
        return None
    svc = _config(args).service
    if svc.tls_cert or not svc.port or svc.host not in ("127.0.0.1", "localhost", "::1"):
        return None
    address = f"{svc.host}:{svc.port}"
    from protos import eor_pb2
    from protos.client import EorClient

    try:
        with EorClient(address, timeout_s=1.0) as client:
            return address if client.health(timeout_s=1.0).status == eor_pb2.HealthReply.SERVING else None
    except Exception:  # nothing listening, or not an eor service: answer in this process
        return None


def cmd_ask(args) -> int:
    if not getattr(args, "server", None):
        args.server = running_service(args)
        if args.server:  # its engine is warm: seconds instead of an engine start
            print(f"eor: answered by the running eor serve at {args.server} (--local: answer in this process)",
                  file=sys.stderr)
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
    choice = voter_choice(args, pool, con, config)
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
    def on_provisional(open_answers, positions) -> None:
        if len(questions) == 1:
            a = open_answers[0]
            con.note(_provisional_line(a.stopped_at, a.stages, a.vote.answer, a.vote.retriever, a.vote.score))
    answers = answer(questions, choice, pool, build_metrics(choice.options, pool.reader), specs, on_stage,
                     on_provisional)
    elapsed = time.time() - t
    con.done()
    if engine is not None and hasattr(engine, "close"):
        engine.close()  # its shutdown messages go to the log too, not after the answer
    return answers, choice, pool, elapsed

