"""The whole pool's run as the confidence-aware fit reads it (`PoolRun`: answers, rightness,
log-probabilities, the similarity tensor, what each set of rounds cost), and each question's view
after each round of a layout (voter/selector.py: RoundView), the scorer's training rows and picks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from fitting.questions import correctness
from splits import passage_groups
from fitting.pricing import ReaderSpeed, priced_seconds, unit_speed, weighted_tokens
from voter.adaptive_model import Layout
from voter.cascade import early_view
from voter.question_vote import answer_grid, equal_weights, similarity_inputs
from voter.selector import AnswerScorer, RoundView, candidate_features, feature_names


@dataclass
class PoolRun:
    """The whole pool's run over N questions, as the fit needs it.

    answers [N][M] (None: no vote), right [N, M] (is the answer correct), logprobs [N][M],
    sim [N, M, M, K] and mask [N, M] (the voter's inputs), vote(sim, mask) -> scores [N, M],
    cost(i, rounds) -> what question i costs when `rounds` (sets of specs) ran in order, in reader
    tokens (the latency model's unit)."""

    pool: tuple[str, ...]
    answers: list[list[str | None]]
    right: np.ndarray
    logprobs: list[list[tuple[float, ...] | None]]
    sim: np.ndarray
    mask: np.ndarray
    vote: Callable[[np.ndarray, np.ndarray], np.ndarray]
    cost: Callable[[int, tuple[frozenset, ...]], float]
    datasets: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)  # each question's passage group: CV folds never cut one

    def __len__(self) -> int:
        return len(self.answers)

    def subset(self, rows: Sequence[int]) -> "PoolRun":
        rows = list(rows)
        return PoolRun(self.pool, [self.answers[i] for i in rows], self.right[rows],
                       [self.logprobs[i] for i in rows], self.sim[rows], self.mask[rows], self.vote,
                       lambda i, s, rows=rows: self.cost(rows[i], s), [self.datasets[i] for i in rows],
                       [self.groups[i] for i in rows] if self.groups else [])



def pool_run(scored: Sequence, pool: Sequence[str], metrics: Sequence[Any], vote,
             weights: dict[str, float] | None = None, speeds: dict[str, ReaderSpeed] | None = None) -> PoolRun:
    """`speeds` (every reader's, measured: `eor models speed`): a question's cost is its reader seconds
    round by round (prefill and decode apart) in the unit reader's prefill tokens (`unit_speed`);
    else `weights`, each reader's cost per token relative to the default reader's (reader_weights)."""
    results = [r for _, r in scored]
    grid = answer_grid(results, pool)
    sim, mask = similarity_inputs(results, grid, metrics)
    right = correctness(scored, pool)
    lps = [[{c.retriever: c.logprobs for c in r.candidates}.get(s) for s in pool] for r in results]
    if speeds:
        unit = unit_speed(speeds)

        def cost(i: int, rounds: Sequence[frozenset]) -> float:
            return unit * priced_seconds(results[i], rounds, speeds)
    else:
        def cost(i: int, rounds: Sequence[frozenset]) -> float:
            return weighted_tokens(results[i], sorted(frozenset().union(*rounds)), weights)
    return PoolRun(tuple(pool), grid, right, lps, sim, mask, vote, cost, [q.dataset for q, _ in scored],
                   question_groups([q for q, _ in scored]))


def question_groups(questions: Sequence) -> list[str]:
    """Each question's group: those sharing a gold passage (`gold_pids`, directly or through
    others) are one; a question without gold passages is its own."""
    groups = passage_groups({str(i): tuple(getattr(q, "gold_pids", ()) or ()) for i, q in enumerate(questions)})
    return [groups[str(i)] for i in range(len(questions))]


def equal_vote(pool: Sequence[str], metrics: Sequence[str], pooling: str):
    """The vote score the scorer reads: equal weights over whatever ran (every retriever may
    win; the scorer weighs them). The same rule votes live (voter/question_vote.py)."""
    equal = equal_weights(pool, metrics, pooling).voter()
    return lambda s, m: equal.decision_scores((s, m))


def _views(run: PoolRun, cols: np.ndarray) -> list[RoundView]:
    """Each question's view once the members `cols` marks have answered."""
    scores = run.vote(run.sim, run.mask & cols[None, :])
    return [RoundView(tuple(a if cols[m] else None for m, a in enumerate(run.answers[i])),
                      tuple(float(x) for x in scores[i]), tuple(run.logprobs[i])) for i in range(len(run))]


def round_views(run: PoolRun, layout: Layout) -> tuple[list[list[RoundView]], np.ndarray, np.ndarray]:
    """(views [N][R], tokens [N, R], rounds [N, R]): each question after each round, and what
    it cost so far."""
    index = {s: m for m, s in enumerate(run.pool)}
    n, r = len(run), len(layout)
    views: list[list[RoundView]] = [[None] * r for _ in range(n)]  # type: ignore[list-item]
    tokens = np.zeros((n, r))
    cols = np.zeros(len(run.pool), dtype=bool)
    ran: list[frozenset] = []
    for k, rnd in enumerate(layout):
        cols[[index[s] for s in rnd]] = True
        ran.append(frozenset(rnd))
        for i, view in enumerate(_views(run, cols)):
            views[i][k] = view
            tokens[i, k] = run.cost(i, tuple(ran))
    rounds = np.broadcast_to(np.arange(1, r + 1, dtype=np.float64), (n, r)).copy()
    return views, tokens, rounds


def early_views(run: PoolRun, layout: Layout, preview: Sequence[str] = ()) -> list[list[RoundView]] | None:
    """[N][1]: each question's view after the first reply's members alone (as `picks` takes views);
    None where there is no first reply of its own."""
    members = early_view(layout, preview)
    if members is None:
        return None
    cols = np.isin(np.array(run.pool, dtype=object), list(members))
    return [[v] for v in _views(run, cols)]


def scored_views(views: list[list[RoundView]], firsts: list[list[RoundView]] | None) -> list[list[RoundView]]:
    """Every view the scorer is asked to score, to train it on: each round's and the early answer's
    (a smaller vote than round 1's: a scorer that never saw one puts its P anywhere; on 80 fit
    questions the 0.5B's 16 in one round gave its 7 one-step members' vote P ~ 0, right half the time)."""
    return views if firsts is None else [v + f for v, f in zip(views, firsts)]


def training_rows(views: list[list[RoundView]], right: np.ndarray, pool: Sequence[str],
                  rows: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Every candidate of every round of the given questions: (X, y)."""
    xs, ys = [], []
    for i in rows:
        for view in views[i]:
            X, idx = candidate_features(view, pool)
            if len(idx):
                xs.append(X)
                ys.append(right[i, idx])
    if not xs:
        return np.zeros((0, len(feature_names(pool)))), np.zeros(0)
    return np.vstack(xs), np.concatenate(ys)


def picks(views: list[list[RoundView]], right: np.ndarray, pool: Sequence[str], scorer: AnswerScorer,
          rows: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(P of the pick [n, R], pick right [n, R], picked pool index [n, R]) for the given questions."""
    r = len(views[0]) if views else 0
    p = np.zeros((len(rows), r))
    ok = np.zeros((len(rows), r))
    who = np.full((len(rows), r), -1)
    for j, i in enumerate(rows):
        for k, view in enumerate(views[i]):
            X, idx = candidate_features(view, pool)
            if not len(idx):
                continue
            probs = scorer.predict_proba(X)
            b = int(np.argmax(probs))
            p[j, k], ok[j, k], who[j, k] = probs[b], right[i, idx[b]], idx[b]
    return p, ok, who


def cv_folds(n: int, k: int, seed: int = 0, groups: Sequence[str] | None = None) -> list[np.ndarray]:
    """k test folds over n questions, by question; with `groups` (one per question), whole groups
    in a seeded order, each to the fold with the fewest questions so far, so no passage group is on
    both sides of a fold (nested CV grouped by passage)."""
    if not groups or len(set(groups)) == n:  # every question its own group: the folds by question
        order = np.random.default_rng(seed).permutation(n)
        return [order[f::k] for f in range(k)]
    if len(groups) != n:
        raise ValueError(f"{len(groups)} groups for {n} questions")
    members: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    keys = list(members)
    folds: list[list[int]] = [[] for _ in range(k)]
    for j in np.random.default_rng(seed).permutation(len(keys)):
        min(folds, key=len).extend(members[keys[j]])
    return [np.array(sorted(f), dtype=int) for f in folds]
