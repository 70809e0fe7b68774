"""The confidence-aware model a voter file ships (eor-voter/3 and later), as a value: its round
layout, the answer scorer (voter/selector.py), the calibrator of the scorer's P
(voter/calibration.py; None in files fitted before there was one: then the raw P is the
confidence) and the stop thresholds on that confidence. What the service reads; fitting it is
fitting/ (layout_fit.py, search.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from voter.calibration import EARLY, Calibrator
from voter.cascade import Cascade, early_view
from voter.selector import AnswerScorer, feature_names

Layout = tuple[tuple[str, ...], ...]


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
        """The rounds and their thresholds on `confidence`: the rounds every entry point runs."""
        return Cascade(self.layout, self.thresholds, target=1.0, preview=self.preview)

    def confidence(self, p: float, k: int | str | None = None) -> float:
        """The scorer's P(right) for the answer after 0-based round `k` (EARLY: the first reply;
        None: after a set of members that is none of the rounds), as the caller gets it and the
        stop rule reads it."""
        return p if self.calibrator is None else self.calibrator(p, k)

    def confidence_rounds(self, p: np.ndarray) -> np.ndarray:
        """[N, R] P per question and round -> their confidences."""
        return p if self.calibrator is None else self.calibrator.predict_rounds(p)

    def round_of(self, members: Iterable[str]) -> int | str | None:
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
