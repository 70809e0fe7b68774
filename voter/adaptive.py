"""Fitting confidence-aware adaptive EoR on a run of the whole pool: round layouts, the answer
scorer (cross-validated by question), the stop thresholds and the choice of layout by expected
latency at the accuracy target. Pure numpy on arrays the run already holds (voter/selector.py
is the per-question logic; serve/ reads run logs and prints).

With a calibration method, the picks' out-of-fold P are calibrated (voter/calibration.py) and
the stop thresholds are fitted on the calibrated P: the number the caller gets with each answer
is the number the stop rule reads.

A *round* is one batched fan-out of retrievers; its cost is the reader work it does plus a fixed
per-round overhead (a sequential engine round trip), so a layout is judged by expected latency =
rounds run x overhead + cost / tokens_per_s, not by tokens alone. PoolRun.cost says what the
work costs, in tokens of the latency model's unit (serve/offline/adaptive.py: pool_run prices
prefill and decode apart per reader where their speeds were measured).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from retrievers.spec import parse_spec, split_reader
from voter.calibration import (DEFAULT_METHOD as DEFAULT_CALIBRATION, EARLY, Calibrator, brier_score,
                               expected_calibration_error, fit_calibrator, log_loss)
from voter.cascade import Cascade, early_answer, early_members, stop_stages
from voter.selector import (AnswerScorer, RoundTrace, RoundView, candidate_features, evaluate_stop,
                            feature_names, fit_stop_thresholds, frontier)

DEFAULT_ROUND_OVERHEAD_S = 1.0  # issue 26 measured ~1 s a stage; where bench.load_test compare measured it here, eor fit reads that
CV_FOLDS, CV_SEED, SCORER_C = 5, 0, 1.0  # the adaptive fit's cross-validation and regularisation
DEFAULT_TOKENS_PER_S = 400.0  # reader tokens computed per second on the 2-core CPU (bf16); set from the run
# the one-retriever service (through the default reader) whose whole answer a stream's first reply
# must not trail (issue 33: bench.load_test compare's --single)
SERVICE_BASELINE = "Wiki@10"
LATENCY_CAP = 3.0  # the cascade's expected latency over that service's at most (issue 33), for a quick first reply


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

    def __len__(self) -> int:
        return len(self.answers)

    def subset(self, rows: Sequence[int]) -> "PoolRun":
        rows = list(rows)
        return PoolRun(self.pool, [self.answers[i] for i in rows], self.right[rows],
                       [self.logprobs[i] for i in rows], self.sim[rows], self.mask[rows], self.vote,
                       lambda i, s, rows=rows: self.cost(rows[i], s), [self.datasets[i] for i in rows])


Layout = tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class LatencyModel:
    round_overhead_s: float = DEFAULT_ROUND_OVERHEAD_S
    tokens_per_s: float = DEFAULT_TOKENS_PER_S
    # round 1's early answer has the cores first (its reader's engine at a lower niceness than the
    # rest's: serve/engine/priority.py), so it reads as if alone; else they share the cores
    early_first: bool = False

    def seconds(self, rounds: float, tokens: float) -> float:
        return rounds * self.round_overhead_s + tokens / self.tokens_per_s


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


def early_view(layout: Layout, preview: Sequence[str] = ()) -> tuple[str, ...] | None:
    """The members of a stream's first reply: the preview (read beside round 1, never voted after),
    else round 1's early answer's (voter/cascade.py: early_answer), read before the rest; None
    where there is none."""
    if preview:
        return tuple(preview)
    return early_answer(layout[0]) if layout else None


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


def folds_by_question(n: int, k: int, seed: int = 0) -> list[np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    return [order[f::k] for f in range(k)]


@dataclass(frozen=True)
class LayoutFit:
    """A layout's fit on the fit split: the out-of-fold trace, thresholds, and its CV figures."""

    layout: Layout
    thresholds: tuple[float, ...]
    cv_accuracy: float  # out-of-fold: stop rule applied to out-of-fold probabilities
    cv_all_rounds: float  # out-of-fold accuracy when every round runs (the selector alone)
    tokens: float
    rounds: float
    latency_s: float
    first_round_share: float
    frontier: list[dict[str, float]]
    calibrator: Calibrator | None = None  # None: the stop rule and the caller read the scorer's raw P
    cv_ece: float = math.nan  # ECE (10 bins) of the answers delivered, on questions neither scorer nor calibrator saw
    first_reply_s: float = math.nan  # expected seconds to a stream's first reply (round 1's early answer)
    cv_ece_early: float = math.nan  # the same for the first reply's P (NaN: no first reply of its own)
    preview: tuple[str, ...] = ()  # read beside round 1 for a stream's first reply, never voted (fit_layout)


def fit_layout(run: PoolRun, layout: Layout, latency: LatencyModel, folds: int = CV_FOLDS, C: float = SCORER_C,
               tolerance: float = 0.005, seed: int = CV_SEED, calibration: str | None = None,
               preview: Sequence[str] = ()) -> LayoutFit:
    """Out-of-fold P for every question and round (the scorer never sees the question it
    scores), calibrated when `calibration` names a method, then the cheapest-latency thresholds
    on it within `tolerance` of running every round.

    `preview`: members read beside round 1 for a stream's first reply and never voted after. The
    scorer is trained on the rounds alone (so the layout's answers, stops and CV figures are those
    without it), the preview's P gets a calibration line of its own, and its reader work is paid on
    top of the rounds' (the cores are shared); its first reply is priced as round 1's early answer is."""
    preview = tuple(preview)
    views, tokens, rounds = round_views(run, layout)
    firsts = early_views(run, layout, preview)  # the first reply: scored, on a line of its own
    seen = views if preview else scored_views(views, firsts)
    n, r = len(run), len(layout)
    p, ok = np.zeros((n, r)), np.zeros((n, r))
    p_early, ok_early, who_early = np.zeros((n, 1)), np.zeros((n, 1)), np.full((n, 1), -1)
    for test in folds_by_question(n, min(folds, n), seed):
        train = np.setdiff1d(np.arange(n), test)
        scorer = AnswerScorer(C).fit(*training_rows(seen, run.right, run.pool, train))
        p[test], ok[test], _ = picks(views, run.right, run.pool, scorer, test)
        if firsts is not None:
            p_early[test], ok_early[test], who_early[test] = picks(firsts, run.right, run.pool, scorer, test)
    cost = np.vectorize(latency.seconds)(rounds, tokens)
    answered = who_early[:, 0] >= 0  # no early candidate: no first reply, no P (as the service and eval)
    first = (p_early[answered, 0], ok_early[answered, 0]) if firsts is not None else None
    calibrator = fit_calibrator(p, ok, calibration, first) if calibration else None
    trace = RoundTrace(calibrator.predict_rounds(p) if calibrator else p, ok, cost)
    tau = fit_stop_thresholds(trace, tolerance)
    ece = delivered_ece(RoundTrace(p, ok, cost), calibration, tolerance, folds, seed)
    ece_early = (early_ece(p, ok, p_early[:, 0], ok_early[:, 0], calibration, folds, seed, answered)
                 if firsts is not None else math.nan)
    acc, lat, stop = evaluate_stop(trace, tau)
    rows = np.arange(n)
    work = early_answer_work(run, layout[0], latency.early_first, preview)
    first_reply = float(np.mean(latency.seconds(1, work)))
    if preview:  # its reader work delays the rounds' on the shared cores
        lat += float(np.mean([run.cost(i, (frozenset(preview),)) for i in range(n)])) / latency.tokens_per_s
    return LayoutFit(layout, tau, acc, float(ok[:, -1].mean()), float(tokens[rows, stop].mean()),
                     float(rounds[rows, stop].mean()), lat, float((stop == 0).mean()), frontier(trace),
                     calibrator, ece, first_reply, ece_early, preview)


def early_ece(p: np.ndarray, right: np.ndarray, p_early: np.ndarray, right_early: np.ndarray,
              calibration: str | None, folds: int = CV_FOLDS, seed: int = CV_SEED,
              answered: np.ndarray | None = None) -> float:
    """ECE (10 bins) of round 1's early answers' P as a stream's first reply carries it: per fold,
    the calibrator fitted on the other questions' out-of-fold P (the rounds' [N, R] and the early
    answers' [N]), applied to these questions' early answers. `answered` [N]: the questions with an
    early answer (None: all); the others carry no P and count nowhere."""
    n = len(p_early)
    answered = np.ones(n, dtype=bool) if answered is None else np.asarray(answered, dtype=bool)
    if answered.sum() < 2:
        return math.nan
    conf = np.zeros(n)
    for test in folds_by_question(n, min(folds, n), seed):
        train = np.setdiff1d(np.arange(n), test)
        if calibration is None:
            conf[test] = p_early[test]
            continue
        early = train[answered[train]]
        cal = fit_calibrator(p[train], right[train], calibration, (p_early[early], right_early[early]))
        conf[test] = cal.predict(p_early[test], EARLY)
    return expected_calibration_error(conf[answered], right_early[answered])


def delivered_ece(raw: RoundTrace, calibration: str | None, tolerance: float = 0.005, folds: int = CV_FOLDS,
                  seed: int = CV_SEED) -> float:
    """ECE (10 bins) of the P each question's *answer* comes with, the answer of the round it
    stops after, as a caller gets it: per fold, the calibrator and the stop thresholds fitted on
    the other questions' out-of-fold P, then applied to these. (Every round's pick pooled is not
    that: session 23 measured 0.05 there against 0.09 on the answers delivered.)"""
    n = len(raw.p)
    if n < 2:
        return math.nan
    conf, right = np.zeros(n), np.zeros(n)
    for test in folds_by_question(n, min(folds, n), seed):
        train = np.setdiff1d(np.arange(n), test)
        cal = fit_calibrator(raw.p[train], raw.right[train], calibration) if calibration else None
        p_train, p_test = ((cal.predict_rounds(raw.p[train]), cal.predict_rounds(raw.p[test])) if cal else
                           (raw.p[train], raw.p[test]))
        tau = fit_stop_thresholds(RoundTrace(p_train, raw.right[train], raw.cost[train]), tolerance)
        stop = stop_stages(p_test, tau)
        rows = np.arange(len(test))
        conf[test], right[test] = p_test[rows, stop], raw.right[test][rows, stop]
    return expected_calibration_error(conf, right)


def early_answer_work(run: PoolRun, first_round: Sequence[str], early_first: bool = False,
                      preview: Sequence[str] = ()) -> np.ndarray:
    """Per question, the work (latency-model tokens) before its first streamed reply: the preview,
    else round 1's early answer (voter/cascade.py: early_members), while the rest of round 1 reads
    beside it on the same cores. Processor sharing: with a of its own and b beside it, it ends at a + min(a, b).
    Measured in the service (session 22): the 0.5B's SE@1 beside the 1.5B's SE@1 answered in 2.41 s;
    priced alone, 1.75 s with the round's overhead (2.5 s shared). `early_first` (its reader has the
    cores first): a, as alone (bench/reader_priority.py: 1.26 s beside the 1.5B's two prompts, 0.93 s
    alone, 2.73 s sharing the cores)."""
    early = frozenset(preview or early_members(first_round))
    rest = frozenset(first_round) - early
    a = np.array([run.cost(i, (early,)) for i in range(len(run))], dtype=float)
    if not rest or early_first:
        return a
    return a + np.minimum(a, [run.cost(i, (rest,)) for i in range(len(run))])


@dataclass(frozen=True)
class AdaptiveModel:
    """What the fit ships: the layout, the scorer, the calibrator of its P (None in files fitted
    before there was one: then the raw P is the confidence) and the thresholds on that confidence."""

    layout: Layout
    scorer: AnswerScorer
    thresholds: tuple[float, ...]
    calibrator: Calibrator | None = None
    preview: tuple[str, ...] = ()  # read beside round 1 for a stream's first reply, never voted (fit_layout)
    # how it was fitted, kept in the file as written (`fit_record`): tolerance, C, CV folds and seed,
    # the latency model, every candidate layout with its CV figures. Empty: a file fitted before.
    fit: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def cascade(self) -> Cascade:
        """The rounds and their thresholds on `confidence`: the stages every entry point runs."""
        return Cascade(self.layout, self.thresholds, target=1.0, preview=self.preview)

    def confidence(self, p: float, stage: int | None = None) -> float:
        """The scorer's P(right) for the answer after 0-based round `stage` (None: after a set of
        members that is none of the rounds), as the caller gets it and the stop rule reads it."""
        return p if self.calibrator is None else self.calibrator(p, stage)

    def confidence_rounds(self, p: np.ndarray) -> np.ndarray:
        """[N, R] P per question and round -> their confidences."""
        return p if self.calibrator is None else self.calibrator.predict_rounds(p)

    def stage_of(self, members: Iterable[str]) -> int | str | None:
        """The round whose answer a vote after asking `members` is: the first k whose rounds 1..k
        hold them all (the voter's own rounds 1..k: k); the first reply (the preview, else round 1's
        early answer): EARLY (its own calibration line, else round 1's). None: a member no round
        holds (a caller's own retrievers from outside the layout)."""
        ran, have = set(members), set()
        early = early_view(self.layout, self.preview)
        if early is not None and ran == set(early):
            return EARLY
        for k, rnd in enumerate(self.layout):
            have |= set(rnd)
            if ran <= have:
                return k
        return None

    def to_dict(self, pool: Sequence[str]) -> dict[str, Any]:
        d = {"rounds": [list(r) for r in self.layout],
             "thresholds": [None if not math.isfinite(t) else t for t in self.thresholds],
             "scorer": self.scorer.to_dict(feature_names(pool))}
        if self.calibrator is not None:
            d["calibrator"] = self.calibrator.to_dict()
        if self.preview:
            d["preview"] = list(self.preview)
        if self.fit:
            d["fit"] = self.fit
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], pool: Sequence[str]) -> "AdaptiveModel":
        layout = tuple(tuple(str(s) for s in r) for r in d["rounds"])
        unknown = sorted({s for r in layout for s in r} - set(pool))
        if unknown:
            raise ValueError(f"adaptive model: rounds name retrievers not in the pool: {unknown}")
        tau = tuple(math.inf if t is None else float(t) for t in d["thresholds"])
        if len(tau) != len(layout) - 1:
            raise ValueError(f"adaptive model: {len(tau)} thresholds for {len(layout)} rounds")
        calibrator = Calibrator.from_dict(d["calibrator"]) if d.get("calibrator") is not None else None
        if calibrator is not None and calibrator.n_rounds not in (None, len(layout)):
            raise ValueError(f"adaptive model: the calibrator has lines for {calibrator.n_rounds} rounds, "
                             f"the layout {len(layout)}")
        preview = tuple(str(s) for s in d.get("preview") or ())
        if set(preview) - set(pool) or set(preview) & {s for r in layout for s in r}:
            raise ValueError(f"adaptive model: the preview {list(preview)} names a retriever not in the pool "
                             "or one a round asks")
        return cls(layout, AnswerScorer.from_dict(d["scorer"], feature_names(pool)), tau, calibrator, preview,
                   dict(d.get("fit") or {}))


def fit_record(chosen: LayoutFit, layouts: Sequence[LayoutFit], latency: LatencyModel, *, tolerance: float,
               C: float, folds: int, seed: int, calibration: str | None,
               first_reply: tuple[str, float, float] | None = None) -> dict[str, Any]:
    """What the voter file says about its adaptive fit, so a reader can audit the choice: the
    settings, the latency model it assumed and every candidate layout with its CV figures."""
    def r(x: float) -> float | None:
        return round(float(x), 4) if math.isfinite(x) else None

    bound = {}
    if first_reply is not None:  # (the member, its first reply, the latency cap), and whether the chosen met both
        ref, reply_s, cap_s = first_reply
        bound = {"first_reply_vs": ref, "first_reply_bound_s": r(reply_s), "latency_cap_s": r(cap_s),
                 "first_reply_met": bool(chosen.first_reply_s <= reply_s and chosen.latency_s <= cap_s)}
    return {"tolerance": tolerance, "C": C, "cv_folds": folds, "cv_seed": seed, "calibration": calibration,
            "tokens_per_s": r(latency.tokens_per_s), "round_overhead_s": latency.round_overhead_s,
            "early_answer_first": latency.early_first, **bound,
            "layouts": [{"rounds": [list(x) for x in f.layout], **({"preview": list(f.preview)} if f.preview else {}),
                         "chosen": f is chosen, "cv_match": r(f.cv_accuracy),
                         "cv_match_all_rounds": r(f.cv_all_rounds), "latency_s": r(f.latency_s),
                         "tokens": r(f.tokens), "rounds_run": r(f.rounds), "first_round_share": r(f.first_round_share),
                         "cv_ece": r(f.cv_ece), "first_reply_s": r(f.first_reply_s),
                         **({"cv_ece_early": r(f.cv_ece_early)} if math.isfinite(f.cv_ece_early) else {})}
                        for f in layouts]}


def fit_model(run: PoolRun, fit: LayoutFit, C: float = SCORER_C, record: dict[str, Any] | None = None) -> AdaptiveModel:
    views, _, _ = round_views(run, fit.layout)
    seen = views if fit.preview else scored_views(views, early_views(run, fit.layout))  # as fit_layout
    scorer = AnswerScorer(C).fit(*training_rows(seen, run.right, run.pool, range(len(run))))
    return AdaptiveModel(fit.layout, scorer, fit.thresholds, fit.calibrator, fit.preview, record or {})


@dataclass(frozen=True)
class Outcome:
    """The adaptive model on questions: per question its answer index, right or not, cost, and
    the confidence that came with the answer."""

    picked: np.ndarray
    right: np.ndarray
    tokens: np.ndarray
    rounds: np.ndarray
    stop: np.ndarray
    confidence: np.ndarray


def apply_model(run: PoolRun, model: AdaptiveModel) -> Outcome:
    views, tokens, rounds = round_views(run, model.layout)
    rows = list(range(len(run)))
    p, ok, who = picks(views, run.right, run.pool, model.scorer, rows)
    conf = model.confidence_rounds(p)
    stop = stop_stages(conf, model.thresholds)
    i = np.arange(len(run))
    return Outcome(who[i, stop], ok[i, stop], tokens[i, stop], rounds[i, stop], stop, conf[i, stop])


@dataclass(frozen=True)
class HeldOut:
    """A shipped model's raw P on questions it was never fitted on, read as its cascade reads them
    (`eor calibrate`): each round's pick where the question reached that round (NaN after the
    round it stopped at, or where no member answered), whether it was right, the round each
    stopped after, and the first reply's P (NaN: none)."""

    p: np.ndarray  # [N, R]
    right: np.ndarray  # [N, R]
    stop: np.ndarray  # [N]
    p_early: np.ndarray  # [N]
    right_early: np.ndarray  # [N]

    def at_stop(self) -> tuple[np.ndarray, np.ndarray]:
        """(raw P, right) [N] of the round each question stopped after (P NaN: no answer, so wrong)."""
        rows = np.arange(len(self.stop))
        return self.p[rows, self.stop], self.right[rows, self.stop]

    def delivered(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(raw P, right, round) of each answer a caller got: the round each question stopped after
        (questions with no answer left out)."""
        p, right = self.at_stop()
        keep = np.isfinite(p)
        return p[keep], right[keep], self.stop[keep]


def held_out(run: PoolRun, model: AdaptiveModel) -> HeldOut:
    """The model's own picks and stops on `run`, a cascade's reads of questions it never saw: a
    round after the stop was not read there, so its P is NaN, not the pick of an empty vote."""
    views, _, _ = round_views(run, model.layout)
    p, ok, who = picks(views, run.right, run.pool, model.scorer, range(len(run)))
    stop = stop_stages(model.confidence_rounds(p), model.thresholds)
    reached = np.arange(len(model.layout))[None, :] <= stop[:, None]
    firsts = early_views(run, model.layout, model.preview)
    p_early, ok_early = np.full(len(run), np.nan), np.zeros(len(run))
    if firsts is not None:
        pe, oke, whoe = picks(firsts, run.right, run.pool, model.scorer, range(len(run)))
        p_early, ok_early = np.where(whoe[:, 0] >= 0, pe[:, 0], np.nan), oke[:, 0]
    return HeldOut(np.where(reached & (who >= 0), p, np.nan), ok, stop, p_early, ok_early)


def _fit_held_out(held: HeldOut, method: str, rows: np.ndarray) -> Calibrator:
    early = rows[np.isfinite(held.p_early[rows])]
    return fit_calibrator(held.p[rows], held.right[rows], method,
                          (held.p_early[early], held.right_early[early]) if len(early) else None)


@dataclass(frozen=True)
class HeldOutScores:
    """How well a P(right) does on held-out answers: of the answers delivered, ECE (10 bins, the
    issue's measure), log loss and Brier score (proper scores: steadier at a few hundred
    answers); of the first replies, ECE and log loss (NaN: none)."""

    ece: float
    log_loss: float
    brier: float
    early_ece: float
    early_log_loss: float


def held_out_scores(held: HeldOut, method: str | None, calibrator: Calibrator | None = None,
                    folds: int = CV_FOLDS, seed: int = CV_SEED) -> HeldOutScores:
    """`method` None: `calibrator` as it is (None: the raw P) on every question; else lines of that
    method fitted per fold on the other questions (cross-validation by question), as `recalibrate`
    would fit them."""
    n = len(held.stop)
    conf, conf_early = np.full(n, np.nan), np.full(n, np.nan)
    rows = np.arange(n)
    p_stop, right = held.at_stop()

    def apply(cal: Calibrator | None, test: np.ndarray) -> None:
        for i in test:
            if np.isfinite(p_stop[i]):
                conf[i] = cal(p_stop[i], int(held.stop[i])) if cal is not None else p_stop[i]
            if np.isfinite(held.p_early[i]):
                conf_early[i] = cal(held.p_early[i], EARLY) if cal is not None else held.p_early[i]
    if method is None:
        apply(calibrator, rows)
    else:
        for test in folds_by_question(n, min(folds, n), seed):
            apply(_fit_held_out(held, method, np.setdiff1d(rows, test)), test)
    a, e = np.isfinite(conf), np.isfinite(conf_early)
    return HeldOutScores(expected_calibration_error(conf[a], right[a]), log_loss(conf[a], right[a]),
                         brier_score(conf[a], right[a]), expected_calibration_error(conf_early[e], held.right_early[e]),
                         log_loss(conf_early[e], held.right_early[e]))


def recalibrate(model: AdaptiveModel, held: HeldOut, method: str | None = None) -> AdaptiveModel:
    """The model with its calibration lines fitted again on `held` (questions it never saw), and its
    thresholds carried to the new lines so that every question stops after the same round: the
    layout, scorer, answers, stops and latency are the model's; only the P each answer carries
    changes. The lines are taken as a file holds them (8 decimals), and each carried threshold is
    held to `held`'s own stops (a P on the old threshold stops on the new one too: float error in
    the round trip is not allowed to move it)."""
    method = method or (model.calibrator.method if model.calibrator is not None else DEFAULT_CALIBRATION)
    if method == "isotonic":
        raise ValueError("recalibrate fits Platt lines (platt-per-round or platt): an isotonic step function "
                         "could move a stop")
    cal = Calibrator.from_dict(_fit_held_out(held, method, np.arange(len(held.stop))).to_dict())
    old = model.calibrator
    conf = cal.predict_rounds(held.p)  # NaN where a round was not reached
    tau = list(model.thresholds)
    for k, t in enumerate(model.thresholds):
        if not math.isfinite(t):
            continue
        if cal.line(k)[0] <= 0:
            raise ValueError(f"the new line for round {k + 1} is flat (its answers all right or all wrong): a stop "
                             "threshold cannot be carried along it; calibrate on more questions")
        tau[k] = cal(old.raw(t, k) if old is not None else t, k)
        stopped, went_on = held.stop == k, held.stop > k
        if stopped.any():
            tau[k] = min(tau[k], float(np.nanmin(conf[stopped, k])))
        if np.any(conf[went_on, k] >= tau[k]):
            raise ValueError(f"round {k + 1}'s threshold cannot be carried to the new line without moving a stop")
    return replace(model, calibrator=cal, thresholds=tuple(tau))


def _splits(members: Sequence[str], firsts: Sequence[int], seconds: Sequence[int]) -> list[tuple[list, list]]:
    """(first round, middle round) over members sorted by value: the best f first, the next m."""
    return [(list(members[:f]), list(members[f:f + m])) for f in firsts for m in seconds]


def candidate_layouts(pool: Sequence[str], accuracy: dict[str, float], cost: dict[str, float],
                      firsts: Sequence[int] = (1, 2, 3), seconds: Sequence[int] = (0, 1, 2, 3, 5)) -> list[Layout]:
    """Round layouts to compare: the first round is the best members by accuracy per token
    cost (so it can answer alone), an optional middle round the next best, the last the rest;
    and the one-round layout (the whole pool, no stop). In a pool of several readers, also each
    reader's members alone (the same layouts over them, and their own one-round vote: a strong
    reader's vote is not the whole pool's, where the small reader's many answers outvote it) and
    the escalations: the best default-reader members first, then the stronger readers reading
    those same retrievers' passages, then the rest, or the stronger readers' rest alone
    (FrugalGPT's cascade, over retrievers too); and the stronger readers' layouts with the default
    reader's best member as a round of its own before them, or beside their round 1 (its early
    answer, voter/cascade.py: early_members): a stream's first reply as soon as the one-retriever
    service's (choose_layout's bound). A layout need not ask every member: each
    (first, middle) split is also a layout of its own, without the rest (never one round alone:
    a subset's one-round vote would move the all-kept anchor choose_layout measures from)."""
    from retrievers.spec import by_reader

    value = _by_value(pool, accuracy, cost)
    groups = by_reader(value)
    out: list[Layout] = [(tuple(pool),)]

    def add(*rounds: Sequence[str]) -> None:
        layout = tuple(tuple(s for s in pool if s in x) for x in rounds if x)  # pool order within a round
        if len(layout) == 1 and len(layout[0]) < 2:  # one retriever alone is no vote (nor an anchor)
            return
        if layout and layout not in out:
            out.append(layout)

    for first, mid in _splits(value, firsts, seconds):
        add(first, mid, [s for s in value if s not in first and s not in mid])
        if mid:  # stop there: the rest may cost more than it adds (a long decode, a slow reader)
            add(first, mid)
    if len(groups) > 1:
        for members in groups.values():
            add(members)  # this reader's own vote, in one round
            for first, mid in _splits(members, firsts, seconds):
                add(first, mid, [s for s in members if s not in first and s not in mid])
                if mid:
                    add(first, mid)
        plain = groups.get("", [])
        strong = [s for s in value if parse_spec(s).reader]
        quick = [s for s in [quick_member(pool, accuracy, cost)] if s]
        if quick and strong:  # a quick first answer, alone or beside a strong layout's round 1
            for first, mid in _splits(strong, firsts, seconds):
                rest = [s for s in strong if s not in first and s not in mid]
                for lead in ([quick, first], [quick + first]):
                    if len(lead) + bool(mid) + bool(rest) > 1:  # never a one-round subset (no anchor)
                        add(*lead, mid, rest)
                    if mid:
                        add(*lead, mid)
        for f in firsts:
            first = plain[:f]
            up = [s for s in strong if split_reader(s)[0] in first]
            if first and up:
                add(first, up, [s for s in value if s not in first and s not in up])
                add(first, up, [s for s in strong if s not in up])
            if first and strong:
                add(first, strong)
    return out


def _by_value(pool: Sequence[str], accuracy: dict[str, float], cost: dict[str, float]) -> list[str]:
    """The members by accuracy per square-rooted token cost, best first."""
    return sorted(pool, key=lambda s: (-accuracy[s] / max(cost[s], 1.0) ** 0.5, s))


def quick_member(pool: Sequence[str], accuracy: dict[str, float], cost: dict[str, float]) -> str | None:
    """The default reader's best one-step member by value: a quick first answer (None: none)."""
    from retrievers.spec import DEFAULT_READER_NAME

    return next((s for s in _by_value(pool, accuracy, cost)
                 if parse_spec(s).reader == DEFAULT_READER_NAME and parse_spec(s).reader_steps == 1), None)


def acceptable(fits: Sequence[LayoutFit], tolerance: float = 0.005) -> list[LayoutFit]:
    """The layouts whose CV accuracy is within `tolerance` of the all-kept vote's (choose_layout's
    anchor: a one-round layout, every retriever, no stop; with several readers, the best of the
    whole pool's and each reader's own)."""
    whole = [f for f in fits if len(f.layout) == 1]
    anchor = max(f.cv_accuracy for f in (whole or fits))
    return [f for f in fits if f.cv_accuracy >= anchor - tolerance]


def preview_candidates(fits: Sequence[LayoutFit], quick: str, tolerance: float, first_reply_s: float) -> list[Layout]:
    """The layouts to fit again with `quick` as their preview (fit_layout): those choose_layout may
    pick (`acceptable`) whose first reply misses `first_reply_s` and which have no first reply of
    their own and do not ask `quick`. A preview keeps a layout's answers and CV figures and adds its
    work, so on a layout that meets the bound already it only costs time."""
    return [f.layout for f in acceptable(fits, tolerance)
            if not f.preview and f.first_reply_s > first_reply_s and early_view(f.layout) is None
            and quick not in {s for r in f.layout for s in r}]


def anchor_se(fits: Sequence[LayoutFit], n: int) -> float:
    """One standard error of the anchor's CV accuracy over `n` fit questions (acceptable's anchor):
    how far a layout may fall below it and still be the same within the fit's own noise."""
    whole = [f for f in fits if len(f.layout) == 1]
    p = max(f.cv_accuracy for f in (whole or fits))
    return math.sqrt(p * (1.0 - p) / max(n, 1))


def choose_layout(fits: Sequence[LayoutFit], tolerance: float = 0.005,
                  first_reply_s: float | None = None, latency_cap_s: float | None = None,
                  widen_to: float | None = None) -> LayoutFit:
    """The lowest expected latency among layouts whose CV accuracy is within `tolerance` of the
    all-kept vote's (a one-round layout: every retriever, no stop; with several readers, the best
    of the whole pool's and each reader's own). Anchored there, not on the best layout's: on a fit
    split of ~100 questions the best of a dozen layouts leads by a question or two of noise, and
    chasing it picked a layout 3x as slow for 1 question in 140. `first_reply_s` (None: no bound):
    among those, only layouts whose early answer comes within it (a stream's first reply no later
    than the one-retriever service's whole answer) and whose expected latency is within
    `latency_cap_s` (None: any), where any is. Where none is, the layout that misses its bounds
    least, relatively (the larger of first reply / bound and latency / cap): both are the issue's
    goals, and on 240 fit questions the only quick-first-reply layout was 2% over the cap while
    the rest missed the first reply by 38% (2026-11-27; in the service the former measured 2.72x).
    Without a cap, the bound is given up (the mean latency is kept). The cap applies only with a
    first-reply bound. `widen_to` (anchor_se: one standard error of the anchor; None: never), where
    no layout within `tolerance` meets both bounds: the most accurate layout within `widen_to` of
    the anchor that meets both, else the least relative excess among those within it. At 280 fit
    questions the anchor rose and a 0.5-pt tolerance (one question is 0.36 pt) left out every layout
    under the cap: the choice then ran 46% over it for 1.1 pt of CV Match, inside a 2.8-pt error."""
    ok = acceptable(fits, tolerance)
    if first_reply_s is not None:
        cap = math.inf if latency_cap_s is None else latency_cap_s

        def meets(f: LayoutFit) -> bool:
            return f.first_reply_s <= first_reply_s and f.latency_s <= cap

        met = [f for f in ok if meets(f)]
        if not met and widen_to is not None and widen_to > tolerance and math.isfinite(cap):
            ok = acceptable(fits, widen_to)
            wide = [f for f in ok if meets(f)]
            if wide:  # the bounds met at the least loss of accuracy
                return max(wide, key=lambda f: (f.cv_accuracy, -f.latency_s))
        if met:
            ok = met
        elif math.isfinite(cap):
            return min(ok, key=lambda f: (max(f.first_reply_s / first_reply_s, f.latency_s / cap), f.latency_s,
                                          -f.cv_accuracy))
    return min(ok, key=lambda f: (f.latency_s, -f.cv_accuracy))
