"""Recall@k of the two retrieval sources against gold passages.

    python -m bench.retrieval_recall --index shared [--questions FILE] [--dataset nq-open-oracle]

Wiki hits are passages (`id` or `id#n` of a corpus record); SE hits are pages, which count as
containing the gold passage when one of their member records is gold.
"""
from __future__ import annotations

import argparse
import json
import time

from bench.common import DEFAULT_QUESTIONS, read_questions
from retrievers.corpus import base_id
from retrievers.encoder import Encoder
from retrievers.sources.lucene import page_members
from serve.builder import index_path
from serve.config import IndexConfig, EorConfig
from serve.builder import make_sources

KS = (1, 5, 10)


def recall_at(ranked_ids: list[set[str]], gold: set[str], k: int) -> float:
    return float(any(ids & gold for ids in ranked_ids[:k]))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--index", default="shared")
    ap.add_argument("--questions", default=DEFAULT_QUESTIONS)
    ap.add_argument("--dataset", default="nq-open-oracle")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = read_questions(args.questions, args.dataset, args.limit)
    sources = make_sources(EorConfig(index=IndexConfig(name=args.index)), Encoder())
    qs = [r["question"] for r in rows]
    members = page_members(index_path(args.index) / "se")
    report = {"index": str(index_path(args.index)), "dataset": args.dataset, "questions": len(rows)}
    for name, src in sources.items():
        t = time.perf_counter()
        hits = src.load().search(qs, max(KS))
        per_q = time.perf_counter() - t
        sums = {k: 0.0 for k in KS}
        for r, row in zip(rows, hits):
            gold = set(r["gold_pids"])
            if name == "SE":
                ranked = [set(members[p.pid]) for p in row]
            else:
                ranked = [{base_id(p.pid)} for p in row]
            for k in KS:
                sums[k] += recall_at(ranked, gold, k)
        report[name] = {f"recall@{k}": round(sums[k] / len(rows), 4) for k in KS}
        report[name]["ms_per_query"] = round(1000 * per_q / len(rows), 2)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{report['questions']} {args.dataset} questions, index {report['index']}")
        for name in sources:
            r = report[name]
            print(f"  {name:<5} " + "  ".join(f"R@{k}={r[f'recall@{k}']:.3f}" for k in KS)
                  + f"  ({r['ms_per_query']} ms/query)")
    return report


if __name__ == "__main__":
    main()
