"""`eor ask`: questions through a running `eor serve` (--server, or a local one that is up), else
through the pool of the warm reader this or an earlier ask left (serve/cli/warm/), else through a
pool in this process (--local, --no-warm, --verbose); the voter's cascade in every case.

Every answer comes with its P(right) (voter/decision.py): calibrated, the answer scorer's raw P
(a voter file without a calibrator), or unknown (a voter without an answer scorer); the output
says which. `--min-confidence P` prints "not sure" with the best guess and its P below P."""
from __future__ import annotations

import json
import sys
import time

from retrievers.spec import parse_spec
from serve.cli.common import _config, _fmt_score, print_result, result_to_dict, voter_choice
from serve.cli.warm.pools import ONE_SHOT


def _provisional_line(rounds_run: int, n_rounds: int, answer: str, retriever: str | None, score: float | None,
                      confidence: float | None = None) -> str:
    when = f"after stage {rounds_run}/{n_rounds}" if rounds_run else f"early in stage 1/{n_rounds}"
    sure = f"P(right) {confidence:.2f}" if confidence is not None else f"score {_fmt_score(score)}"
    return f"{when}: provisional answer {answer!r} from {retriever or '-'} ({sure}); asking more retrievers"


def confidence_words(p: float | None, kind: str) -> str:
    """P(right) as a user reads it, saying what kind of number it is."""
    if p is None:
        return ("P(right) unknown (this voter has no answer scorer)" if kind == "none"
                else "P(right) unknown (no retriever answered)")
    if kind == "raw":
        return f"P(right) {p:.2f} (uncalibrated: the answer scorer's own P; this voter file has no calibrator)"
    return f"P(right) {p:.2f}"


def answer_lines(d: dict, min_confidence: float | None, how: str) -> list[str]:
    """One question's answer (`d` shaped like --json's output): the "A:" line, `how` it was
    voted, and its P(right); "not sure" with the best guess below `min_confidence` (None: the
    server's own default decided)."""
    if d["retriever"] is None and not d["abstained"]:
        return ["A: (no retriever answered)"]
    sure = confidence_words(d["confidence"], d["confidence_kind"])
    notes = ([f"   {d['degraded']}"] if d.get("degraded") else []) + \
        (["   answered early: the service is under load"] if d.get("under_load") else [])
    if d["abstained"]:
        bar = "the server's min_confidence" if min_confidence is None else f"{min_confidence:g}"
        return [f"A: not sure ({sure}, below {bar}); best guess: {d['guess']}", how, *notes]
    return [f"A: {d['answer']}", how, f"   {sure}", *notes]


def check_min_confidence_arg(args) -> float | None:
    """--min-confidence, checked before any work (one line when it is not a number in [0, 1])."""
    from voter.decision import check_min_confidence

    text = getattr(args, "min_confidence", None)
    return None if text is None else check_min_confidence(text)


def _ask_remote(args) -> int:
    """`eor ask --server HOST:PORT`: the questions go to a running `eor serve` over gRPC."""
    from protos.client import EorClient, reply_to_dict

    import grpc

    if args.weights or args.equal_weights:
        raise ValueError("--weights / --equal-weights choose the voter of an in-process ask; a server votes with "
                         "its own voter (change it with `eor fit --push`)")
    specs = args.retrievers.split(",") if args.retrievers else ()
    wanted = check_min_confidence_arg(args)  # None: the server's default
    with EorClient(args.server, tls_ca=args.tls_ca) as client:
        try:
            if len(args.question) == 1:  # progressive: a line per round that left it open, then the answer
                replies = []
                for r in client.ask_stream(args.question[0], specs, min_confidence=wanted):
                    if r.final:
                        replies.append(r)
                    elif not args.json:
                        print(_provisional_line(r.stopped_at_stage, r.stages, r.answer or r.guess, r.retriever,
                                                r.score if r.HasField("score") else None,
                                                r.confidence if r.HasField("confidence") else None),
                              file=sys.stderr, flush=True)
            else:
                replies = list(client.ask_batch(args.question, specs, min_confidence=wanted).replies)
        except grpc.RpcError as exc:
            print(f"eor: error: {args.server}: {exc.code().name}: {exc.details()}", file=sys.stderr)
            return 2 if exc.code() == grpc.StatusCode.INVALID_ARGUMENT else 1
    out = [reply_to_dict(r) for r in replies]
    if args.json:
        print(json.dumps(out[0] if len(out) == 1 else out, indent=2, ensure_ascii=False))
        return 0
    for d in out:
        print(f"Q: {d['question']}")
        margin = "none (no other answer)" if d["margin"] is None else f"{d['margin']:.3f}"
        print("\n".join(answer_lines(d, wanted, f"   from {d['retriever']}, score {_fmt_score(d['score'])}, "
                                    f"margin {margin}; settled after stage {d['stopped_at_stage']} of {d['stages']}")))
        for c in d["candidates"]:
            if c["error"]:
                print(f"  {c['retriever']:<20} FAILED: {c['error']}")
            else:
                print(f"  {c['retriever']:<20} {_fmt_score(c['score']):>6}  {c['answer']}")
        print(f"   ran: {', '.join(d['ran'])}\nvoter: {d['voter']}")
        print(f"({d['latency_s']:.1f} s on {args.server}; missing: {', '.join(d['failed']) or 'none'})")
    return 0


def answer_to_dict(ans, choice, min_confidence: float = 0.0) -> dict:
    """One question as JSON: the answer and its P(right) (or, below `min_confidence`, "not
    sure": no answer, the best guess beside it), which voter decided, what ran and where it stopped."""
    from voter.decision import abstains

    d = result_to_dict(ans.result, ans.vote)
    c = ans.confidence
    unsure = abstains(c, min_confidence)
    head = {"question": d["question"], "answer": "" if unsure else d["answer"],
            "confidence": c.p if c is not None else None,
            "confidence_kind": c.kind if c is not None else choice.saved.confidence_kind,
            "abstained": unsure, "guess": d["answer"] if unsure else None}
    d = head | {k: v for k, v in d.items() if k not in head}
    d["voter"] = {"id": choice.saved.digest if choice.saved.fitted else "equal-weights",
                  "description": choice.describe(), "source": choice.source}
    d["ran"] = ans.ran
    d["stopped_at_stage"], d["stages"] = ans.rounds_run, ans.n_rounds
    d["not_run"] = [s for s in choice.saved.pool if s not in ans.ran]
    tokens = ans.result.reader_tokens()
    d["reader_tokens"] = vars(tokens) | {"total": tokens.total}
    return d


def print_answer(ans, choice, verbose: bool, min_confidence: float = 0.0) -> None:
    v = ans.vote
    print(f"Q: {ans.result.question}")
    margin = "none (no other answer)" if v.margin is None else f"{v.margin:.3f}"
    print("\n".join(answer_lines(answer_to_dict(ans, choice, min_confidence), min_confidence,
                                f"   from {v.retriever}, score {_fmt_score(v.score)}, margin {margin}; "
                                f"settled after stage {ans.rounds_run} of {ans.n_rounds}")))
    if v.retriever is not None:
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
    return serving_address(_config(args))


def serving_address(config) -> str | None:
    """The address of the local `eor serve` of this config, when it is up (grpc.health SERVING)."""
    svc = config.service
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
    from serve.cli.warm.client import ask_warm

    warm = ask_warm(args)  # the warm reader's exit status, or None: answer in this process
    return warm if warm is not None else answer_here(args)


def answer_here(args, pools=ONE_SHOT) -> int:
    """The in-process ask; the warm reader runs it for an `eor ask` with the pool it keeps."""
    from serve.cli.console import Console, log_path

    from retrievers.pool import check_question

    questions = [check_question(q) for q in args.question]  # refuse bad input before loading models
    wanted = check_min_confidence_arg(args)
    min_confidence = _config(args).service.min_confidence if wanted is None else wanted  # the service's default too
    with Console(verbose=args.verbose and not args.json) as con:  # --json: stdout carries only the JSON
        answers, choice, pool, elapsed = _ask_local(args, questions, con, pools)
    if args.json:
        out = [answer_to_dict(a, choice, min_confidence) for a in answers]
        print(json.dumps(out[0] if len(out) == 1 else out, indent=2, ensure_ascii=False))
        return 0
    for a in answers:
        print_answer(a, choice, args.verbose, min_confidence)
    print(f"voter: {choice.describe()}; metrics {','.join(choice.options.names)}")
    from voter.question_vote import model_name

    asked = [r for name, r in pool.readers.items() if r.stats.prompts or not name]  # the default one always
    readers = "; ".join(f"reader{' ' + model_name(r.model_id) if len(asked) > 1 else ''}: {r.stats.calls} engine "
                        f"calls, {r.stats.engine_prompts} prompts generated, {r.stats.cache_hits} cache hits"
                        for r in asked)
    print(f"({elapsed:.1f} s; {readers}{'' if args.verbose else f'; library logs in {log_path()}'})")
    return 0


def _quickest_engines(config):
    """Each reader's engine the one that starts soonest on this machine (vllm_engine.py:
    quickest_start: compiled where its compile cache is warm, else eager), decided per reader
    (the others inherit the `reader` section's settings otherwise)."""
    from dataclasses import asdict, replace

    from serve.config_readers import reader_config, used_readers
    from serve.engine.vllm_engine import quickest_start

    readers = {**config.readers, **{name: asdict(quickest_start(reader_config(config, name)))
                                    for name in used_readers(config) if name}}
    return replace(config, reader=quickest_start(config.reader), readers=readers)


def _ask_local(args, questions, con, pools):
    """The in-process ask, with a progress line per step on the console."""
    from serve.orchestrator import answer

    con.step("loading the voter, the indexes and the encoder")
    config = _config(args)
    if config.reader.enforce_eager is None:  # one question: each engine the one that starts soonest
        config = _quickest_engines(config)
    from serve.builder import runnable_config

    config, notes = runnable_config(config)  # a reader not prepared here: its members left out, said
    for note in notes:
        con.warn(note)
    pool = pools.get(config)
    choice = voter_choice(args, pool, con, config)
    specs = args.retrievers.split(",") if args.retrievers else None
    for s in specs or ():  # a bad or unknown spec fails before the models load
        parse_spec(s)
        if s not in pool.specs:
            raise KeyError(f"retriever {s!r} is not in the pool; pool: {', '.join(pool.specs)}")
    pool.load()
    for name, src in getattr(pool, "sources", {}).items():  # (the tests' stand-in pools have none)
        if getattr(src, "building", lambda: False)():
            con.note(f"the {name} index is still being built (`eor index`): a round that reads {name} waits for it")
    from serve.config_readers import reader_config

    for name, reader in pool.readers.items():  # each engine starts on its first prompt
        model = reader_config(config, name).model
        what = f"the reader engine ({model}, vLLM)" if not name else f"reader {name}'s engine ({model}, vLLM)"
        reader.engine.on_start = lambda what=what: con.step(f"starting {what}")
    t = time.time()

    def on_round(k: int, n: int, specs: list[str]) -> None:
        con.step(f"stage {k}/{n}: {', '.join(specs)}")
    def on_provisional(open_answers, positions) -> None:
        if len(questions) == 1:
            a = open_answers[0]
            con.note(_provisional_line(a.rounds_run, a.n_rounds, a.vote.answer, a.vote.retriever, a.vote.score,
                                       a.confidence.p if a.confidence is not None else None))
    answers = answer(questions, choice, pool, pools.metrics(choice.options, pool.reader), specs, on_round,
                     on_provisional)
    elapsed = time.time() - t
    con.done()
    pools.release(pool)
    return answers, choice, pool, elapsed

