"""`EoRVoter`: the EoR voter as a scikit-learn-style estimator (paper §4, fit as in §4.2).

X is `(sim, mask)`: the precomputed similarity tensor [N, M, M, K] and which retrievers
answered [N, M]. y is correctness [N, M] (any g: EM, Match, BEM, human labels). `fit`
maximises the mean correctness of the chosen answer over omega_s (K) and omega_r (M) with
SciPy Nelder-Mead inside [0, upper_bound], from several initial simplices, keeping the best.
The objective is argmax-based, hence piecewise constant: large initial simplices, restarts
and a soft tie-breaker worth less than one question (`VoteObjective`) keep Nelder-Mead from
stalling on its plateaus. The similarity tensor is computed once; each objective evaluation
is pure numpy over all questions (no Python loop over questions).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from voter.pooling import get_pooling
from voter.voting import (
    VoteRule,
    VoterWeights,
    choose,
    decision_scores as _decision_scores,
    scores_from_combined,
    vote_margin as _vote_margin,
)


@dataclass(frozen=True)
class VoterConfig:
    """Every knob of the voter and its fit, with its default: the one home of the voter's
    settings (EoRVoter's parameters, the fit's FitConfig.voter, a voter file's fields and
    equal weights take their defaults from here); validated on construction."""

    pooling: str = "mean"
    threshold: float = 0.1  # t: retrievers with omega_r < t are dropped
    upper_bound: float = 0.6  # upper bound on every omega_s and omega_r
    n_restarts: int = 6
    seed: int = 0
    sim_threshold: float = 0.5  # s for majority / plurality pooling
    dropped_vote: bool = False
    max_fev: int | None = None  # objective evaluations per restart (None: SciPy's 200*dims)
    xatol: float = 1e-3
    tie_break: float = 0.5  # weight of the soft term, in units of 1/N (< 1 keeps accuracy first)
    temperature: float = 0.05  # softmax temperature of the soft term

    def __post_init__(self) -> None:
        get_pooling(self.pooling)
        if not 0.0 < self.upper_bound:
            raise ValueError("upper_bound must be > 0")
        if not 0.0 <= self.threshold < self.upper_bound:
            raise ValueError("threshold must lie in [0, upper_bound)")
        if self.n_restarts < 1:
            raise ValueError("n_restarts must be >= 1")
        if self.max_fev is not None and self.max_fev < 1:
            raise ValueError("max_fev must be >= 1")
        if not 0.0 <= self.tie_break < 1.0:
            raise ValueError("tie_break must lie in [0, 1): the soft term may only break ties")
        if self.temperature <= 0:
            raise ValueError("temperature must be > 0")

    @property
    def rule(self) -> VoteRule:
        return VoteRule(self.pooling, self.sim_threshold, self.dropped_vote)


def _check_X(X: Any) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(X, tuple) and len(X) == 2:
        sim, mask = X
    else:
        raise TypeError("X must be a (sim [N, M, M, K], mask [N, M]) tuple")
    sim = np.nan_to_num(np.asarray(sim, dtype=np.float64), nan=0.0)
    mask = np.asarray(mask, dtype=bool)
    if sim.ndim != 4 or sim.shape[1] != sim.shape[2]:
        raise ValueError(f"sim must be [N, M, M, K], got {sim.shape}")
    if mask.shape != sim.shape[:2]:
        raise ValueError(f"mask must be {sim.shape[:2]}, got {mask.shape}")
    return sim, mask


def _check_y(y: Any, shape: tuple[int, int]) -> np.ndarray:
    y = np.nan_to_num(np.asarray(y, dtype=np.float64), nan=0.0)
    if y.shape != shape:
        raise ValueError(f"y must be {shape} (correctness per question and retriever), got {y.shape}")
    return y


def chosen_correctness(pred: np.ndarray, y: np.ndarray) -> np.ndarray:
    """y[i, pred[i]] per question; 0 where nothing was chosen (pred = -1)."""
    got = np.take_along_axis(y, np.clip(pred, 0, None)[:, None], axis=1)[:, 0]
    return np.where(pred >= 0, got, 0.0)


class VoteObjective:
    """Negative mean correctness of the voted answer as a function of theta = [omega_s, omega_r].

    Holds the similarity tensor metric-major ([K, N, M, M], contiguous) so combining the
    metrics is K fused multiply-adds; no Python loop over questions.

    Accuracy is a step function of theta, flat almost everywhere, which stalls Nelder-Mead.
    With `tie_break` > 0 the value also carries a soft term -- the expected correctness
    under a softmax of the voter scores (temperature `temperature`) -- scaled by
    tie_break / N < 1 / N, so it can only order points of *equal* accuracy: the optimum is
    still the best mean correctness, but flat regions get a slope toward it. (Exact for 0/1
    correctness; with graded y, e.g. token F1, it may trade accuracy gains below 1/N.)
    """

    def __init__(self, sim: np.ndarray, mask: np.ndarray, y: np.ndarray, config: VoterConfig):
        self.sim_k = np.ascontiguousarray(np.moveaxis(sim, -1, 0))
        self.mask = mask
        self.y = y
        self.config = config
        self.rule = config.rule
        self.n_metrics = sim.shape[-1]
        self.n_evals = 0
        n = max(mask.shape[0], 1)
        self._soft_weight = config.tie_break / n

    def split(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        theta = np.clip(np.asarray(theta, dtype=np.float64), 0.0, self.config.upper_bound)
        return theta[: self.n_metrics], theta[self.n_metrics :]

    def scores(self, theta: np.ndarray) -> np.ndarray:
        """[N, M] voter scores for theta (-inf where an answer cannot win)."""
        ws, wr = self.split(theta)
        combined = ws[0] * self.sim_k[0]
        for k in range(1, self.n_metrics):
            combined += ws[k] * self.sim_k[k]
        kept = wr >= self.config.threshold
        return scores_from_combined(combined, self.mask, wr, kept, self.rule)

    def predict(self, theta: np.ndarray) -> np.ndarray:
        return choose(self.scores(theta))

    def accuracy(self, theta: np.ndarray) -> float:
        return float(chosen_correctness(self.predict(theta), self.y).mean())

    def soft_accuracy(self, scores: np.ndarray) -> float:
        """Mean expected correctness under softmax(scores / temperature) over candidates."""
        z = scores / self.config.temperature  # -inf stays -inf -> probability 0
        top = z.max(axis=1, keepdims=True)
        e = np.exp(z - np.where(np.isfinite(top), top, 0.0))
        total = e.sum(axis=1)
        hit = (e * self.y).sum(axis=1)
        return float(np.divide(hit, total, out=np.zeros_like(hit), where=total > 0).mean())

    def __call__(self, theta: np.ndarray) -> float:
        self.n_evals += 1
        scores = self.scores(theta)
        acc = float(chosen_correctness(choose(scores), self.y).mean())
        if self._soft_weight > 0:
            acc += self._soft_weight * self.soft_accuracy(scores)
        return -acc


@dataclass(frozen=True)
class RestartResult:
    x0: tuple[float, ...]
    accuracy: float
    n_evals: int
    theta: tuple[float, ...] = field(repr=False)


class EoRVoter:
    """The EoR voter: fit omega_s / omega_r on a training set, then vote (argmax of eq. 7).

    scikit-learn conventions: constructor only stores parameters; learned attributes end in
    `_` (`weights_`, `objective_`, `restarts_`); `get_params` / `set_params` work.
    """

    _PARAMS = tuple(VoterConfig.__dataclass_fields__)

    def __init__(
        self,
        pooling: str = VoterConfig.pooling,
        threshold: float = VoterConfig.threshold,
        upper_bound: float = VoterConfig.upper_bound,
        n_restarts: int = VoterConfig.n_restarts,
        seed: int = VoterConfig.seed,
        sim_threshold: float = VoterConfig.sim_threshold,
        dropped_vote: bool = VoterConfig.dropped_vote,
        max_fev: int | None = VoterConfig.max_fev,
        xatol: float = VoterConfig.xatol,
        tie_break: float = VoterConfig.tie_break,
        temperature: float = VoterConfig.temperature,
    ):  # explicit parameters (scikit-learn's convention), their defaults VoterConfig's
        self.pooling = pooling
        self.threshold = threshold
        self.upper_bound = upper_bound
        self.n_restarts = n_restarts
        self.seed = seed
        self.sim_threshold = sim_threshold
        self.dropped_vote = dropped_vote
        self.max_fev = max_fev
        self.xatol = xatol
        self.tie_break = tie_break
        self.temperature = temperature

    # -- scikit-learn plumbing -------------------------------------------------------
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {p: getattr(self, p) for p in self._PARAMS}

    def set_params(self, **params: Any) -> "EoRVoter":
        for k, v in params.items():
            if k not in self._PARAMS:
                raise ValueError(f"unknown parameter {k!r}; valid: {self._PARAMS}")
            setattr(self, k, v)
        return self

    @property
    def config(self) -> VoterConfig:
        return VoterConfig(**self.get_params())

    @classmethod
    def from_config(cls, config: VoterConfig) -> "EoRVoter":
        return cls(**asdict(config))

    @classmethod
    def from_weights(cls, weights: VoterWeights, **params: Any) -> "EoRVoter":
        """A ready-to-vote voter from saved weights (serving: no fit)."""
        voter = cls(**params)
        voter.weights_ = weights
        return voter

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"EoRVoter({args})"

    # -- fitting ---------------------------------------------------------------------
    def objective(self, X: Any, y: Any) -> VoteObjective:
        """The fit objective on (X, y): callable theta -> -mean correctness."""
        sim, mask = _check_X(X)
        return VoteObjective(sim, mask, _check_y(y, mask.shape), self.config)

    def _initial_simplex(self, r: int, dims: int, best: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        """Restart r's simplex. The objective is a step function, so simplices are large:
        r = 0 starts at equal weights (plain similarity voting) with vertex i pushing weight
        i below t (probing each drop); odd restarts perturb the best point so far; even
        ones start anywhere in the box."""
        cfg = self.config
        ub = cfg.upper_bound
        if r == 0:
            x0 = np.full(dims, ub / 2)
            step = np.full(dims, -(ub / 2 - cfg.threshold / 2))
        else:
            x0 = best.copy() if (r % 2 == 1 and best is not None) else rng.uniform(0.0, ub, dims)
            step = rng.uniform(0.25, 0.6, dims) * ub * rng.choice([-1.0, 1.0], dims)
        step = np.where((x0 + step > ub) | (x0 + step < 0), -step, step)
        return np.clip(np.vstack([x0, x0 + np.diag(step)]), 0.0, ub)

    def fit(self, X: Any, y: Any) -> "EoRVoter":
        """Maximise the training mean correctness of the voted answer (§4.2); returns self."""
        from scipy.optimize import minimize

        cfg = self.config
        obj = self.objective(X, y)
        dims = obj.n_metrics + obj.mask.shape[1]
        options: dict[str, Any] = {"xatol": cfg.xatol, "fatol": 1e-9, "adaptive": dims > 10}
        if cfg.max_fev is not None:
            options.update(maxfev=cfg.max_fev, maxiter=cfg.max_fev)
        rng = np.random.default_rng(cfg.seed)
        restarts: list[RestartResult] = []
        best_theta: np.ndarray | None = None
        best_acc = -np.inf
        for r in range(cfg.n_restarts):
            simplex = self._initial_simplex(r, dims, best_theta, rng)
            before = obj.n_evals
            res = minimize(
                obj,
                simplex[0],
                method="Nelder-Mead",
                bounds=[(0.0, cfg.upper_bound)] * dims,
                options={**options, "initial_simplex": simplex},
            )
            theta = np.clip(res.x, 0.0, cfg.upper_bound)
            acc = obj.accuracy(theta)
            restarts.append(RestartResult(tuple(simplex[0]), acc, obj.n_evals - before, tuple(theta)))
            if acc > best_acc:  # strict: ties keep the earliest restart (deterministic)
                best_theta, best_acc = theta, acc
        assert best_theta is not None
        ws, wr = obj.split(best_theta)
        self.weights_ = VoterWeights.from_arrays(ws, wr, cfg.threshold)
        self.objective_ = best_acc
        self.restarts_ = restarts
        self.n_metrics_, self.n_retrievers_ = obj.n_metrics, obj.mask.shape[1]
        return self

    # -- voting ----------------------------------------------------------------------
    def _weights(self) -> VoterWeights:
        w = getattr(self, "weights_", None)
        if w is None:
            raise RuntimeError("EoRVoter is not fitted: call fit() or build it with from_weights()")
        return w

    def decision_scores(self, X: Any) -> np.ndarray:
        """[N, M] voter scores s_m; -inf for missing / dropped retrievers."""
        sim, mask = _check_X(X)
        return _decision_scores(sim, mask, self._weights(), self.config.rule)

    def predict(self, X: Any) -> np.ndarray:
        """[N] index of the chosen answer (lowest index on ties; -1 if no retriever answered)."""
        return choose(self.decision_scores(X))

    def vote_margin(self, X: Any) -> np.ndarray:
        """[N] best minus second-best score (see `voter.voting.vote_margin`)."""
        return _vote_margin(self.decision_scores(X))

    def score(self, X: Any, y: Any) -> float:
        """Mean correctness of the chosen answers."""
        sim, mask = _check_X(X)
        pred = choose(_decision_scores(sim, mask, self._weights(), self.config.rule))
        return float(chosen_correctness(pred, _check_y(y, mask.shape)).mean())
