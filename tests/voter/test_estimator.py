"""EoRVoter: the vectorised objective against a per-question loop, and fitting."""
import numpy as np
import pytest

from tests.voter.conftest import tensor_from_clusters
from voter.estimator import EoRVoter, VoterConfig
from voter.voting import VoterWeights


def reference_choice(sim, mask, ws, wr, t, pooling, s, dropped_vote):
    """Eqs. 6-7 written out per question, straight from the paper (slow, obvious)."""
    out = []
    for i in range(sim.shape[0]):
        comb = sim[i] @ ws
        valid = [m for m in range(sim.shape[1]) if mask[i, m]]
        cands = [m for m in valid if wr[m] >= t] or valid
        voters = valid if dropped_vote else cands
        counts = {m: sum(comb[m, n] > s for n in voters if n != m) for m in cands}
        best, best_score = -1, -np.inf
        for m in cands:
            others = [comb[m, n] for n in voters if n != m]
            if pooling == "mean":
                p = np.mean(others) if others else 0.0
            elif pooling == "max":
                p = max(others) if others else 0.0
            elif pooling == "majority":
                p = float(2 * counts[m] >= len(others))
            else:
                p = float(counts[m] == max(counts.values()))
            score = round(wr[m] * p, 9)
            if score > best_score:
                best, best_score = m, score
        out.append(best)
    return np.array(out)


def random_problem(n, m, k, seed, p_missing=0.15):
    rng = np.random.default_rng(seed)
    sim = rng.random((n, m, m, k))
    sim = (sim + sim.transpose(0, 2, 1, 3)) / 2
    idx = np.arange(m)
    sim[:, idx, idx] = 1.0
    mask = rng.random((n, m)) > p_missing
    y = (rng.random((n, m)) < 0.5).astype(float)
    return (sim, mask), y


@pytest.mark.parametrize("pooling", ["mean", "max", "majority", "plurality"])
@pytest.mark.parametrize("dropped_vote", [False, True])
def test_vectorised_vote_matches_the_per_question_loop(pooling, dropped_vote):
    (sim, mask), y = random_problem(60, 6, 3, seed=1)
    rng = np.random.default_rng(2)
    voter = EoRVoter(pooling=pooling, sim_threshold=0.8, dropped_vote=dropped_vote)
    obj = voter.objective((sim, mask), y)
    for _ in range(5):
        ws, wr = rng.uniform(0, 0.6, 3), rng.uniform(0, 0.6, 6)
        ref = reference_choice(sim, mask, ws, wr, 0.1, pooling, 0.8, dropped_vote)
        np.testing.assert_array_equal(obj.predict(np.r_[ws, wr]), ref)
        voter.weights_ = VoterWeights.from_arrays(ws, wr, 0.1)
        np.testing.assert_array_equal(voter.predict((sim, mask)), ref)
        expected = np.mean([y[i, j] if j >= 0 else 0.0 for i, j in enumerate(ref)])
        assert obj.accuracy(np.r_[ws, wr]) == pytest.approx(expected)
        # the fit value adds a soft tie-breaker worth less than one question
        assert expected <= -obj(np.r_[ws, wr]) < expected + 1 / len(y)
        assert voter.score((sim, mask), y) == pytest.approx(expected)


def one_always_right(n, m, seed, right=2):
    """Retriever `right` is always right; the others are right 40% of the time and their
    wrong answers often agree with each other, so plain similarity voting goes wrong."""
    rng = np.random.default_rng(seed)
    clusters = np.where(rng.random((n, m)) < 0.4, 0, rng.integers(1, 3, (n, m)))
    clusters[:, right] = 0
    return tensor_from_clusters(clusters, k=2), (clusters == 0).astype(float)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fit_learns_to_trust_the_retriever_that_is_always_right(seed):
    X, y = one_always_right(300, 5, seed=seed)
    voter = EoRVoter(seed=seed).fit(X, y)
    assert voter.objective_ == 1.0
    assert voter.score(X, y) == 1.0
    Xt, yt = one_always_right(300, 5, seed=seed + 10)  # held out
    assert voter.score(Xt, yt) == 1.0
    assert (voter.predict(Xt) == 2).mean() > 0.9
    w = voter.weights_
    assert w.kept[2] and all(0.0 <= v <= 0.6 for v in w.retriever_weights + w.metric_weights)
    # better than plain similarity voting with equal weights
    uniform = EoRVoter.from_weights(VoterWeights.from_arrays([0.3, 0.3], [0.3] * 5, 0.1))
    assert uniform.score(Xt, yt) < 0.95


def test_fit_learns_to_ignore_a_misleading_metric():
    rng = np.random.default_rng(0)
    n, m = 300, 6
    clusters = np.where(rng.random((n, m)) < 0.5, 0, rng.integers(1, 4, (n, m)))
    good, mask = tensor_from_clusters(clusters)
    wrong = clusters != 0
    bad = (wrong[:, :, None] & wrong[:, None, :]).astype(float)  # every wrong answer "agrees"
    sim = np.concatenate([good, bad[..., None]], axis=-1)
    sim[:, np.arange(m), np.arange(m)] = 1.0
    y = (~wrong).astype(float)
    voter = EoRVoter(seed=0).fit((sim, mask), y)
    ws = voter.weights_.metric_weights
    assert ws[0] > 5 * ws[1]
    assert voter.objective_ > 0.65 > voter.objective((sim, mask), y).accuracy(np.full(8, 0.3))


def test_fit_is_deterministic_and_records_restarts():
    X, y = one_always_right(120, 4, seed=3)
    a = EoRVoter(n_restarts=3, seed=7).fit(X, y)
    b = EoRVoter(n_restarts=3, seed=7).fit(X, y)
    assert a.weights_ == b.weights_ and a.objective_ == b.objective_
    assert len(a.restarts_) == 3 and a.objective_ == max(r.accuracy for r in a.restarts_)
    assert all(r.n_evals > 0 for r in a.restarts_)


def test_without_the_tie_breaker_the_step_objective_stalls():
    """Why tie_break exists: plain accuracy is flat almost everywhere for Nelder-Mead."""
    X, y = one_always_right(300, 5, seed=1)
    plain = EoRVoter(seed=1, tie_break=0.0).fit(X, y)
    assert plain.objective_ < EoRVoter(seed=1).fit(X, y).objective_ == 1.0


def test_max_fev_caps_each_restart():
    X, y = one_always_right(60, 4, seed=3)
    v = EoRVoter(n_restarts=2, max_fev=15).fit(X, y)
    assert all(r.n_evals <= 16 for r in v.restarts_)  # scipy may finish its last step


def test_voting_over_a_subset_via_the_mask():
    X, y = one_always_right(100, 5, seed=4)
    voter = EoRVoter(seed=0).fit(X, y)
    sim, mask = X
    cheap = mask.copy()
    cheap[:, 2:] = False  # only retrievers 0 and 1 ran
    pred = voter.predict((sim, cheap))
    assert set(np.unique(pred)) <= {0, 1}
    margin = voter.vote_margin((sim, cheap))
    assert margin.shape == (100,) and (margin >= 0).all()


def test_sklearn_plumbing_and_validation():
    v = EoRVoter(pooling="max", threshold=0.2)
    assert v.get_params()["pooling"] == "max"
    assert v.set_params(seed=3).seed == 3
    assert isinstance(v.config, VoterConfig) and v.config.threshold == 0.2
    assert EoRVoter.from_config(v.config).get_params() == v.get_params()
    with pytest.raises(ValueError):
        v.set_params(nonsense=1)
    with pytest.raises(RuntimeError, match="not fitted"):
        v.predict(tensor_from_clusters(np.zeros((2, 3), int)))
    with pytest.raises(ValueError, match="threshold"):
        VoterConfig(threshold=0.7)
    with pytest.raises(TypeError):
        EoRVoter().fit(np.zeros((2, 3, 3, 1)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="y must be"):
        EoRVoter().fit(tensor_from_clusters(np.zeros((2, 3), int)), np.zeros((2, 4)))
