"""Two `eor eval` runs of the same questions set side by side, paired question by question (their questions.jsonl):
each system's Match, EM and F1 in both, the questions only one got right and the two-sided sign test.

    python -m bench.paired_evals A/questions.jsonl B/questions.jsonl [--system NAME ...] [--out FILE]

What issue 54 compares across corpus sizes (bench/scale_quality.sh): the same systems, the same questions,
another index. The questions must be the same in both runs; a system missing from either is refused.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.common import emit_json
from fitting.paired import sign_test

METRICS = ("match", "em", "f1")


def read_records(path: Path) -> dict[str, dict]:
    return {r["qid"]: r for r in map(json.loads, path.read_text(encoding="utf-8").splitlines())}


def paired(a: dict[str, dict], b: dict[str, dict], systems: list[str]) -> dict:
    if set(a) != set(b):
        raise ValueError(f"the two runs asked other questions ({len(set(a) ^ set(b))} differ): pair the same ones")
    qids = sorted(a)
    out = {"questions": len(qids), "systems": {}}
    for system in systems:
        for side, records in (("a", a), ("b", b)):
            if system not in records[qids[0]]["match"]:
                raise ValueError(f"run {side} has no system {system!r}: it has {', '.join(records[qids[0]]['match'])}")
        row = {}
        for metric in METRICS:
            xa = [a[q][metric][system] for q in qids]
            xb = [b[q][metric][system] for q in qids]
            a_higher = sum(x > y for x, y in zip(xa, xb))
            b_higher = sum(y > x for x, y in zip(xa, xb))
            row[metric] = {"a": round(sum(xa) / len(qids), 4), "b": round(sum(xb) / len(qids), 4),
                           "a_higher": a_higher, "b_higher": b_higher,
                           "sign_test_p": round(sign_test(a_higher, b_higher), 4)}
        out["systems"][system] = row
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--system", action="append", default=[], help="a system of both runs (default: every one)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    a, b = read_records(args.a), read_records(args.b)
    systems = args.system or (list(next(iter(a.values()))["match"]) if a else [])
    report = {"a": str(args.a), "b": str(args.b), **paired(a, b, systems)}
    emit_json(report, args.out)
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
