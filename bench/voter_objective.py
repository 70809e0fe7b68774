"""How fast is the voter's fit objective? (`python bench/voter_objective.py`)

Builds a synthetic similarity tensor (2,000 questions x 16 retrievers x 3 metrics, 5% of
answers missing), then times one objective evaluation (median over many) and a whole
`EoRVoter.fit`, with the real estimator code. Numbers go to stdout (and --json).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from voter.estimator import EoRVoter  # noqa: E402


def synthetic_problem(n: int, m: int, k: int, seed: int = 0):
    """Answers fall into clusters (cluster 0 = correct); similar within a cluster, plus noise."""
    rng = np.random.default_rng(seed)
    p_correct = rng.uniform(0.3, 0.7, m)
    correct = rng.random((n, m)) < p_correct[None, :]
    cluster = np.where(correct, 0, rng.integers(1, 5, (n, m)))
    same = cluster[:, :, None] == cluster[:, None, :]
    sim = np.empty((n, m, m, k), dtype=np.float32)
    for kk in range(k):
        base = np.where(same, rng.uniform(0.6, 1.0), rng.uniform(0.0, 0.4))
        noise = rng.normal(0, 0.15, (n, m, m))
        s = np.clip(base + (noise + noise.transpose(0, 2, 1)) / 2, 0, 1)
        idx = np.arange(m)
        s[:, idx, idx] = 1.0
        sim[..., kk] = s
    mask = rng.random((n, m)) > 0.05
    sim[~mask] = 0.0
    sim.transpose(0, 2, 1, 3)[~mask] = 0.0
    return (sim, mask), correct.astype(np.float64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--questions", type=int, default=2000)
    ap.add_argument("--retrievers", type=int, default=16)
    ap.add_argument("--metrics", type=int, default=3)
    ap.add_argument("--evals", type=int, default=200, help="objective evaluations to time")
    ap.add_argument("--pooling", default="mean")
    ap.add_argument("--restarts", type=int, default=6)
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = ap.parse_args()

    X, y = synthetic_problem(args.questions, args.retrievers, args.metrics)
    voter = EoRVoter(pooling=args.pooling, n_restarts=args.restarts, seed=0)
    objective = voter.objective(X, y)
    rng = np.random.default_rng(1)
    thetas = rng.uniform(0, voter.upper_bound, (args.evals, args.metrics + args.retrievers))
    objective(thetas[0])  # warm-up
    times = []
    for theta in thetas:
        t0 = time.perf_counter()
        objective(theta)
        times.append(time.perf_counter() - t0)
    per_eval_ms = 1e3 * float(np.median(times))

    t0 = time.perf_counter()
    voter.fit(X, y)
    fit_s = time.perf_counter() - t0
    n_evals = sum(r.n_evals for r in voter.restarts_)

    best_single = float(y.mean(axis=0).max())
    uniform = objective.accuracy(np.full(args.metrics + args.retrievers, voter.upper_bound / 2))
    result = {
        "questions": args.questions,
        "retrievers": args.retrievers,
        "metrics": args.metrics,
        "pooling": args.pooling,
        "objective_eval_ms_median": round(per_eval_ms, 3),
        "objective_eval_ms_p90": round(1e3 * float(np.percentile(times, 90)), 3),
        "fit_s": round(fit_s, 2),
        "fit_restarts": args.restarts,
        "fit_objective_evals": n_evals,
        "fit_accuracy": round(voter.objective_, 4),
        "uniform_weights_accuracy": round(uniform, 4),
        "best_single_retriever_accuracy": round(best_single, 4),
        "kept_retrievers": int(sum(voter.weights_.kept)),
    }
    for key, val in result.items():
        print(f"{key}: {val}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
