"""What an Ask sends to its retriever groups (issue 56): the bytes of every group call's input
(`RoundInput`, pickled as Ray sends it) with each group sent only what its members read
(`Groundwork.only`) against the whole record as before, over the service's per-spec layout (one group
a member), and whether the answers, winners and candidates stay the same. In-process, the shipped
voter's cascade over a question file's first fit questions; the reader cache makes the second pass
(the whole record sent) free of reader work.

    .venv/bin/python -m bench.group_bytes --questions ../shared/data/questions.dev.jsonl --limit 20 --index shared
"""
from __future__ import annotations

import argparse
import asyncio
import json
import pickle
import sys
from dataclasses import replace
from pathlib import Path


class MeasuredCrew:
    """The in-process pool as one group a member (the service's `retriever_actors: per-spec`),
    counting the pickled bytes of every group call: as sent (`sent`), and with the Ask's whole
    record (`whole`); `send_whole` sends that record instead (how every group was called before)."""

    def __init__(self, pool, decide, holds, send_whole: bool):
        from serve.orchestrator import LocalCrew

        self.local = LocalCrew(pool, decide, holds)
        self.groups = [((s,), pool) for s in holds]
        self.shapes = self.local.shapes
        self.rounds = None  # the AskRounds, for its whole record
        self.send_whole = send_whole
        self.sent = self.whole = self.calls = 0

    async def search(self, src, queries, k, deadline):
        return await self.local.search(src, queries, k, deadline)

    async def run(self, worker, round_):
        index = {q: i for i, q in enumerate(self.rounds.questions)}
        whole = replace(round_, work=tuple(self.rounds.work[index[q]] for q in round_.questions), deadline=None)
        whole_bytes = len(pickle.dumps(whole))
        self.sent += whole_bytes if self.send_whole else len(pickle.dumps(replace(round_, deadline=None)))
        self.whole += whole_bytes
        self.calls += 1
        return await self.local.run(worker, whole if self.send_whole else round_)

    async def decide(self, results, cascade, k, deadline):
        return await self.local.decide(results, cascade, k, deadline)


def ask_all(pool, choice, metrics, questions, send_whole: bool) -> tuple[list, dict]:
    """Each question as one Ask; (answers, the byte counts)."""
    from serve.ensemble import cascade_for
    from serve.orchestrator import AskRounds
    from voter.decision import decide

    cascade = cascade_for(choice.saved.cascade_to_run, None)
    answers, sent, whole, calls = [], 0, 0, 0
    for q in questions:
        crew = MeasuredCrew(pool, lambda r, run, k: decide(r, choice.saved, metrics, run, k), cascade.asked,
                            send_whole)
        rounds = AskRounds([q], cascade, crew, pool.config)
        crew.rounds = rounds
        answers += asyncio.run(rounds.answer())
        sent, whole, calls = sent + crew.sent, whole + crew.whole, calls + crew.calls
    return answers, {"bytes_sent": sent, "bytes_whole_record": whole, "group_calls": calls}


def _view(a) -> dict:
    return {"answer": a.vote.answer, "winner": a.vote.retriever,
            "p": None if a.confidence is None else round(a.confidence.p, 6),
            "candidates": [[c.retriever, c.answer, c.error] for c in a.result.candidates]}


def main(argv: list[str] | None = None) -> int:
    from bench.common import DEFAULT_QUESTIONS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", default=DEFAULT_QUESTIONS)
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--index", default="shared")
    ap.add_argument("--out", default="var/bench/group-bytes.json")
    args = ap.parse_args(argv)

    from serve.builder import close_engines, make_pool
    from serve.config import load_config
    from serve.offline.dataset import Selection, select_questions
    from voter.question_vote import build_metrics, choose_voter
    from serve.builder import pool_reader_models

    config = load_config(None, {"index": {"name": args.index}})
    pool = make_pool(config)
    questions = [q.question for q in select_questions(Selection(args.questions, split="fit", limit=args.limit))]
    choice = choose_voter(pool.specs, pool_reader_models(pool))
    metrics = build_metrics(choice.options, pool.reader)
    try:
        pool.load()
        trimmed, after = ask_all(pool, choice, metrics, questions, send_whole=False)
        whole, before = ask_all(pool, choice, metrics, questions, send_whole=True)
    finally:
        close_engines(pool)
    same = [_view(a) == _view(b) for a, b in zip(trimmed, whole)]
    doc = {"questions": len(questions), "voter": choice.describe(), "before": before, "after": after,
           "bytes_per_ask": {"before": round(before["bytes_sent"] / len(questions)),
                             "after": round(after["bytes_sent"] / len(questions))},
           "after_over_before": round(after["bytes_sent"] / max(before["bytes_sent"], 1), 4),
           "identical_answers_winners_candidates": sum(same),
           "first_difference": next(({"sent_what_it_reads": _view(a), "sent_the_whole_record": _view(b)}
                                     for a, b, ok in zip(trimmed, whole, same) if not ok), None)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
