"""Metric base class, registry and the similarity tensor (no models: fake backends)."""
import numpy as np
import pytest

from voter.similarity import (
    AnswerPair,
    EMSimilarity,
    PairSimilarity,
    available_metrics,
    create_metric,
    register_metric,
    similarity_tensor,
)


class CountingMetric(PairSimilarity):
    """Fake model backend: records every batch it is asked to score."""

    name = "counting"

    def __init__(self, value=0.25, symmetric=True, uses_question=False):
        self.value = value
        self.symmetric = symmetric
        self.uses_question = uses_question
        self.batches: list[list[AnswerPair]] = []
        self.loads = 0

    def load(self):
        self.loads += 1

    def _score(self, pairs):
        self.batches.append(list(pairs))
        # asymmetric on purpose when not symmetric: depends on the order
        return np.array([self.value + (0.5 if (not self.symmetric and p.a < p.b) else 0.0) for p in pairs])

    @property
    def pairs_seen(self):
        return [p for b in self.batches for p in b]


def test_identical_normalised_answers_never_reach_the_model():
    metric = CountingMetric()
    out = metric.score([("The Eiffel Tower.", "eiffel tower", "q"), ("Paris", "PARIS!"), ("a", "an")])
    np.testing.assert_array_equal(out, [1.0, 1.0, 1.0])
    assert metric.batches == [] and metric.loads == 0  # not even loaded


def test_only_the_differing_pairs_are_batched_once():
    metric = CountingMetric(value=0.25)
    out = metric.score([("Paris", "paris"), ("Paris", "London"), ("1990", "1991")])
    np.testing.assert_allclose(out, [1.0, 0.25, 0.25])
    assert len(metric.batches) == 1 and [(p.a, p.b) for p in metric.batches[0]] == [("Paris", "London"), ("1990", "1991")]


def test_scores_are_clipped_to_unit_interval():
    class Wild(CountingMetric):
        def _score(self, pairs):
            return np.array([-0.3, 1.7, np.nan])[: len(pairs)]

    np.testing.assert_array_equal(Wild().score([("a b", "c"), ("d", "e"), ("f", "g")]), [0.0, 1.0, 0.0])


def test_em_metric():
    em = create_metric("em")
    assert isinstance(em, EMSimilarity)
    np.testing.assert_array_equal(em.score([("The Beatles", "beatles"), ("Beatles", "Stones")]), [1.0, 0.0])


def test_registry():
    assert {"em", "bertscore", "nli"} <= set(available_metrics())
    with pytest.raises(ValueError, match="unknown similarity metric"):
        create_metric("rouge")
    with pytest.raises(ValueError, match="already registered"):
        register_metric("em")(lambda: None)
    with pytest.raises(ValueError, match="unknown NLI backend"):
        create_metric("nli", backend="nope")
    # constructors are cheap: building the heavy ones loads nothing
    bs = create_metric("bertscore")
    assert bs._scorer is None
    hf = create_metric("nli", backend="hf", model="/nonexistent")
    assert hf._model is None


ANSWERS = [
    ["Paris", "paris.", "London", None],
    ["Paris", "London", "London", "Rome"],
]
QUESTIONS = ["capital of France?", "capital of the UK?"]


def test_similarity_tensor_shapes_mask_diagonal_and_symmetry():
    em, fake = EMSimilarity(), CountingMetric(value=0.25)
    sim, mask = similarity_tensor(ANSWERS, QUESTIONS, [em, fake])
    assert sim.shape == (2, 4, 4, 2) and sim.dtype == np.float32
    np.testing.assert_array_equal(mask, [[True, True, True, False], [True, True, True, True]])
    for i in range(2):
        for m in range(4):
            if mask[i, m]:
                assert (sim[i, m, m] == 1.0).all()
    assert (sim[0, 3] == 0).all() and (sim[0, :, 3] == 0).all()  # missing retriever
    np.testing.assert_array_equal(sim, sim.transpose(0, 2, 1, 3))
    assert sim[0, 0, 1, 0] == sim[0, 0, 1, 1] == 1.0  # "Paris" == "paris."
    assert sim[0, 0, 2, 0] == 0.0 and sim[0, 0, 2, 1] == pytest.approx(0.25)


def test_each_distinct_unordered_pair_is_scored_once():
    fake = CountingMetric()
    similarity_tensor(ANSWERS, QUESTIONS, [fake])
    assert len(fake.batches) == 1  # one batched call per metric
    seen = sorted(tuple(sorted((p.a.lower().strip("."), p.b.lower()))) for p in fake.pairs_seen)
    # question-independent metric: (paris, london) appears in both questions but once here
    assert seen == [("london", "paris"), ("london", "rome"), ("paris", "rome")]


def test_question_aware_metric_dedups_per_question_only():
    fake = CountingMetric(uses_question=True)
    similarity_tensor(ANSWERS, QUESTIONS, [fake])
    assert len(fake.pairs_seen) == 1 + 3  # q0: (paris, london); q1: 3 pairs
    assert {p.question for p in fake.pairs_seen} == set(QUESTIONS)


def test_asymmetric_metric_scores_both_orders():
    fake = CountingMetric(value=0.25, symmetric=False)
    sim, _ = similarity_tensor([["Paris", "London"]], ["q"], [fake])
    assert len(fake.pairs_seen) == 2
    # "London" < "Paris": the fake adds 0.5 when a < b
    assert sim[0, 1, 0, 0] == pytest.approx(0.75) and sim[0, 0, 1, 0] == pytest.approx(0.25)


def test_all_identical_answers_need_no_model_call():
    fake = CountingMetric()
    sim, mask = similarity_tensor([["Paris", "paris", "PARIS."]], ["q"], [fake])
    assert fake.batches == [] and (sim == 1.0).all()


def test_input_validation():
    with pytest.raises(ValueError, match="questions"):
        similarity_tensor([["a"]], [], [EMSimilarity()])
    with pytest.raises(ValueError, match="same number"):
        similarity_tensor([["a", "b"], ["a"]], ["q1", "q2"], [EMSimilarity()])


def test_a_metric_scores_each_pair_once_across_calls():
    """The stages of an adaptive vote re-vote over the answers so far: only new pairs cost a call."""
    import numpy as np

    from voter.similarity import AnswerPair, PairSimilarity

    class Counting(PairSimilarity):
        name = "counting"
        symmetric = True

        def __init__(self):
            self.scored: list[AnswerPair] = []

        def _score(self, pairs):
            self.scored += pairs
            return np.full(len(pairs), 0.25)

    m = Counting()
    first = m.score([("paris", "lyon"), ("paris", "Paris")])
    assert list(first) == [0.25, 1.0] and len(m.scored) == 1  # equal after normalising: no call
    again = m.score([("lyon", "paris"), ("paris", "nice")])  # the reverse order is the same pair
    assert list(again) == [0.25, 0.25] and [(p.a, p.b) for p in m.scored] == [("paris", "lyon"), ("paris", "nice")]
