"""How many prompt tokens one round's prompts share: what vLLM's prefix cache can reuse.

The pool builds the round's answer prompts for fit-split questions (searches real, no reading:
a stand-in answers), the reader's tokenizer splits them, and each prompt's shared tokens are its
longest common prefix with an earlier prompt of the question, in whole KV blocks (vLLM reuses
only whole blocks, also between prompts it schedules in one step). Per block size and
truncation form (retrievers/corpus.py: truncate_words), the mean per question of the prompt
tokens and of the shared ones. No engine starts.

`--read`: the reader answers the round under each truncation form instead (the reader cache
serves prompts it has seen), and each member's Match is compared between the forms, paired
(questions only the first form gets right / only the second, sign test), with how many answers
the cut changed: what the cut costs or gives in answers, on fit questions.

    python -m bench.prefix_share --limit 60 --specs "SE@1~1.5B" "SE@2&Wiki@5~1.5B"
    python -m bench.prefix_share --limit 44 --read
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Sequence

from bench.common import DEFAULT_QUESTIONS

SHIPPED_ROUND_1 = ("SE@1~1.5B", "SE@2&Wiki@5~1.5B")


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Tokens two token-id lists share from the start."""
    return len(os.path.commonprefix([list(a), list(b)]))


def round_pool(args, form: str):
    """The pool of `args.config` over `args.index`, cutting pages in truncation `form`."""
    from serve.builder import make_pool
    from serve.config import load_config

    return make_pool(load_config(args.config, {"index": {"name": args.index}, "pool": {"truncation": form}}))


def shared_tokens(prompts: Sequence[Sequence[int]], block: int) -> int:
    """One question's prompts, in the order the engine takes them: the tokens the prefix cache
    can serve, each prompt's longest prefix shared with an earlier one, in whole blocks."""
    total = 0
    for i, p in enumerate(prompts):
        best = max((common_prefix(p, q) for q in prompts[:i]), default=0)
        total += best // block * block
    return total


def read(args, questions) -> dict:
    """Each member's answers under each truncation form, read by the real reader; paired."""
    from serve.builder import close_engines
    from voter.qa_metrics import match
    from voter.normalize import normalize_answer
    from fitting.paired import paired_counts, sign_test

    answers: dict[str, dict[str, list[str]]] = {}
    for form in args.truncation:
        pool = round_pool(args, form)
        try:
            results = pool.run_round([q.question for q in questions], list(args.specs)).results
        finally:
            close_engines(pool)
        answers[form] = {s: [next(c.answer for c in r.candidates if c.retriever == s) for r in results]
                         for s in args.specs}
    first, second = args.truncation[:2]
    out = {"questions": len(questions), "forms": [first, second], "members": {}}
    for s in args.specs:
        right = {f: [match(a, q.answers) for a, q in zip(answers[f][s], questions)] for f in (first, second)}
        wins, losses = paired_counts(right[first], right[second])
        out["members"][s] = {
            "match": {f: round(sum(right[f]) / len(questions), 4) for f in (first, second)},
            f"only {first} right": wins, f"only {second} right": losses, "sign_test_p": round(sign_test(wins, losses), 4),
            "answers_changed": sum(normalize_answer(a) != normalize_answer(b)
                                   for a, b in zip(answers[first][s], answers[second][s]))}
    print(json.dumps(out, indent=1), flush=True)
    return out


def measure(args) -> list[dict]:
    from retrievers.reader import Generation
    from retrievers.spec import split_reader
    from retrievers.types import ReaderTokens
    from serve.offline.dataset import Selection, select_questions

    questions = select_questions(Selection(args.questions, None, args.split, args.limit))
    if args.read:
        return [read(args, questions)]
    rows = []
    for form in args.truncation:
        pool = round_pool(args, form)
        seen: list = []

        def stand_in(readers, prompts, params, seen=seen):
            seen.extend(prompts)
            return [Generation("x", (), ReaderTokens(0, 1, 0)) for _ in prompts]
        pool._generate = stand_in
        reader = pool.readers[split_reader(args.specs[0])[1]].engine
        ids = []
        for q in questions:
            seen.clear()
            pool.run_round([q.question], list(args.specs))
            ids.append(reader.token_ids([reader.format(p) for p in seen]))
        n = len(ids)
        for block in args.blocks:
            rows.append({"truncation": form, "block": block, "questions": n,
                         "prompt_tokens": round(sum(sum(map(len, q)) for q in ids) / n, 1),
                         "shared_tokens": round(sum(shared_tokens(q, block) for q in ids) / n, 1)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", default=DEFAULT_QUESTIONS)
    ap.add_argument("--split", default="fit")
    ap.add_argument("--limit", type=int, default=60)
    ap.add_argument("--index", default="shared")
    ap.add_argument("--config", default="deploy/eor-15b.yaml", help="a config whose pool holds the specs")
    ap.add_argument("--specs", nargs="+", default=list(SHIPPED_ROUND_1), help="one round, one reader")
    ap.add_argument("--blocks", nargs="+", type=int, default=[32, 128])
    ap.add_argument("--truncation", nargs="+", default=["own-whitespace", "collapse"])
    ap.add_argument("--read", action="store_true", help="the reader answers under each form: Match, paired")
    measure(ap.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
