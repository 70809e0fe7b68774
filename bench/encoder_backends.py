"""The corpus encoder's backends side by side: speed (interleaved, one run) and what they do to
retrieval (gold-passage recall@10 of NQ questions, queries always torch fp32).

    python -m bench.encoder_backends --passages 4000 --questions 300 [--rounds 3] [--out F.json]

The passages: the gold passages of the first `--questions` NQ questions of ../shared/data, then
other corpus passages up to `--passages`; each backend embeds them all, an exact index is searched.
Speed: each round embeds the same `--speed-texts` passages with every backend in turn, so the
machine's noise falls on all of them alike; the ratio is of summed times.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from bench.common import DEFAULT_QUESTIONS, read_questions
from retrievers.corpus import read_jsonl, to_passages
from retrievers.encoder import Encoder
from retrievers.sources.dense_build import passage_text
from tests.shared_data import CORPUS_FILE

BACKENDS = ("torch", "onnx-int8", "openvino-int8")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passages", type=int, default=4000)
    ap.add_argument("--questions", type=int, default=300)
    ap.add_argument("--speed-texts", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    qs = [q for q in read_questions(DEFAULT_QUESTIONS) if q["dataset"].startswith("nq")][: args.questions]
    gold = {p for q in qs for p in q["gold_pids"]}
    passages = list(to_passages(read_jsonl(CORPUS_FILE)))
    chosen = [p for p in passages if p.doc_id.split("#")[0] in gold]
    chosen += [p for p in passages if p.doc_id.split("#")[0] not in gold][: max(0, args.passages - len(chosen))]
    texts = [passage_text(p) for p in chosen]
    encoders = {b: Encoder(corpus_backend=b).load() for b in BACKENDS}
    for e in encoders.values():
        e.encode_corpus(texts[:8])  # export / warm-up outside the timing
    times = {b: [] for b in BACKENDS}
    for _ in range(args.rounds):
        for b, e in encoders.items():
            t = time.perf_counter()
            e.encode_corpus(texts[: args.speed_texts])
            times[b].append(time.perf_counter() - t)
    queries = encoders["torch"].encode([q["question"] for q in qs])
    report = {"passages": len(texts), "questions": len(qs), "speed_texts": args.speed_texts, "backends": {}}
    vecs = {b: e.encode_corpus(texts) for b, e in encoders.items()}
    for b in BACKENDS:
        top = np.argsort(-(queries @ vecs[b].T), axis=1)[:, :10]
        hits = [any(chosen[i].doc_id.split("#")[0] in q["gold_pids"] for i in row) for row, q in zip(top, qs)]
        report["backends"][b] = {
            "passages_per_s": [round(args.speed_texts / t, 1) for t in times[b]],
            "speed_vs_torch": round(sum(times["torch"]) / sum(times[b]), 2),
            "recall_at_10": round(float(np.mean(hits)), 4),
            "cosine_to_torch_min": round(float((vecs[b] * vecs["torch"]).sum(1).min()), 4),
        }
    print(json.dumps(report, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
