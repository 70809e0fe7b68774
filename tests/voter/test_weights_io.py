import json
from pathlib import Path

import numpy as np
import pytest

from tests.voter.conftest import tensor_from_clusters
from voter.estimator import EoRVoter
from voter.weights_io import FORMAT_V2, Provenance, SavedWeights, check_compatible, load_weights, save_weights

POOL = ["Wiki@10", "SE@1", "PK", "ReFree"]
METRICS = ["em", "bertscore", "nli"]


@pytest.fixture
def fitted():
    rng = np.random.default_rng(0)
    clusters = np.where(rng.random((80, 4)) < 0.5, 0, rng.integers(1, 3, (80, 4)))
    clusters[:, 0] = 0
    X = tensor_from_clusters(clusters, k=3)
    y = (clusters == 0).astype(float)
    return EoRVoter(n_restarts=2, pooling="mean").fit(X, y), X


def provenance(obj):
    return Provenance(questions_file="data/nq_dev_200.jsonl", n_questions=80, reader_model="SmolLM2-135M", objective=obj)


def test_round_trip(tmp_path, fitted):
    voter, X = fitted
    saved = SavedWeights.from_voter(voter, POOL, METRICS, provenance(voter.objective_))
    path = save_weights(tmp_path / "w" / "voter.json", saved)
    raw = json.loads(path.read_text())
    assert raw["format"] == FORMAT_V2 and raw["pool"] == POOL and raw["metrics"] == METRICS  # no adaptive model: v2
    assert raw["pooling"] == "mean" and raw["threshold"] == 0.1
    assert set(raw["weights"]) == {"metric_weights", "retriever_weights", "kept"}
    assert set(raw["provenance"]) >= {"questions_file", "n_questions", "reader_model", "date", "objective"}
    loaded = load_weights(path, pool=POOL, metrics=METRICS)
    assert loaded == saved
    again = loaded.voter()
    np.testing.assert_array_equal(again.predict(X), voter.predict(X))
    np.testing.assert_array_equal(again.decision_scores(X), voter.decision_scores(X))


def test_different_pool_is_refused_with_the_differences(tmp_path, fitted):
    voter, _ = fitted
    path = save_weights(tmp_path / "voter.json", SavedWeights.from_voter(voter, POOL, METRICS, provenance(0.9)))
    with pytest.raises(ValueError) as e:
        load_weights(path, pool=["Wiki@10", "SE@4", "PK", "ReFree"])
    msg = str(e.value)
    assert "different retriever pool" in msg and "'SE@1'" in msg and "'SE@4'" in msg
    with pytest.raises(ValueError, match="different order"):
        load_weights(path, pool=["SE@1", "Wiki@10", "PK", "ReFree"])
    with pytest.raises(ValueError, match="metric list"):
        load_weights(path, pool=POOL, metrics=["em", "bertscore"])
    check_compatible(load_weights(path), POOL, METRICS)  # same: fine


def test_inconsistent_files_are_rejected(fitted):
    voter, _ = fitted
    with pytest.raises(ValueError, match="pool of 3"):
        SavedWeights.from_voter(voter, POOL[:3], METRICS, provenance(0.9))
    with pytest.raises(ValueError, match="duplicate"):
        SavedWeights.from_voter(voter, ["PK"] * 4, METRICS, provenance(0.9))
    with pytest.raises(ValueError, match="not a voter file"):
        SavedWeights.from_dict({"format": "something-else"})


def test_voter_file_round_trip_with_its_cascade_and_old_files(tmp_path, fitted):
    import math

    from voter.cascade import Cascade

    voter, _ = fitted
    saved = SavedWeights.from_voter(voter, POOL, METRICS, provenance(0.9))
    kept = saved.kept_specs()
    stages = (tuple(kept[:2]), *((s,) for s in kept[2:]))
    cascade = Cascade(stages, tuple([0.05] * (len(stages) - 1)), 0.98, 0.99)
    with_cascade = saved.with_cascade(cascade)
    path = save_weights(tmp_path / "voter.json", with_cascade)
    loaded = load_weights(path, pool=POOL)
    assert loaded == with_cascade and loaded.cascade_to_run == cascade and loaded.digest == with_cascade.digest
    assert "fitted voter" in loaded.describe() and "SmolLM2-135M" in loaded.describe()
    # a v1 file (no cascade) loads: its kept retrievers are one stage
    raw = json.loads(path.read_text())
    raw["format"], raw["cascade"] = "eor-voter-weights/1", None
    raw.pop("cascade")
    (tmp_path / "v1.json").write_text(json.dumps(raw))
    old = load_weights(tmp_path / "v1.json", pool=POOL)
    assert old.cascade is None and old.cascade_to_run.rounds == (tuple(kept),)
    # a cascade over other retrievers than the kept ones is refused
    raw = json.loads(path.read_text())
    raw["cascade"]["stages"] = [["Wiki@10", "SE@1", "PK", "ReFree"]]
    raw["cascade"]["thresholds"] = []
    (tmp_path / "bad.json").write_text(json.dumps(raw))
    if sorted(kept) != sorted(POOL):
        with pytest.raises(ValueError, match="kept retrievers"):
            load_weights(tmp_path / "bad.json")


@pytest.mark.parametrize("text", ["[]", "null", "1", '"x"', '{"format": "eor-voter/2"}',
                                  '{"format": "eor-voter/2", "weights": []}', "{oops"])
def test_anything_that_is_not_a_voter_is_a_clear_value_error(tmp_path, text):
    (tmp_path / "v.json").write_text(text)
    with pytest.raises(ValueError) as e:
        load_weights(tmp_path / "v.json")
    assert "v.json" in str(e.value)


def test_a_voter_naming_two_readers_is_v5_and_round_trips_with_its_fallback(tmp_path):
    from tests.voter.conftest import ONE_READER_POOL, SMALL, STRONG, reader_voter
    from voter.weights_io import FORMAT_V5

    fallback = reader_voter(ONE_READER_POOL, readers={})
    saved = reader_voter(fallback=fallback)
    assert saved.readers == {"": SMALL, "1.5B": STRONG} and saved.named_readers == ["", "1.5B"]
    path = save_weights(tmp_path / "v5.json", saved)
    raw = json.loads(path.read_text())
    assert raw["format"] == FORMAT_V5 and raw["readers"] == {"": SMALL, "1.5B": STRONG}
    assert raw["fallback"]["format"] == FORMAT_V2 and raw["fallback"]["pool"] == list(ONE_READER_POOL)
    back = load_weights(path)
    assert back == saved and back.digest == saved.digest and back.fallback == fallback
    assert "1.5B qwen2.5-coder-1.5b" in back.describe()
    no_fallback = reader_voter()  # another reader alone makes it v5 too
    assert no_fallback.to_dict()["format"] == FORMAT_V5 and "fallback" not in no_fallback.to_dict()
    one = reader_voter(ONE_READER_POOL, readers={}, fallback=None)
    assert one.to_dict()["format"] == FORMAT_V2 and "readers" not in one.to_dict()  # its old format: same id


def test_older_files_name_their_one_reader():
    from voter.weights_io import SHIPPED_VOTER

    v2 = load_weights(Path(__file__).parent / "data" / "voter-v2-8b3d50282f43.json")
    assert v2.readers == {"": v2.provenance.reader_model} and v2.digest == "8b3d50282f43" and v2.fallback is None
    v3 = load_weights(Path(__file__).parent / "data" / "voter-v3-abb0f19062fd.json")  # eor-voter/3
    assert v3.readers == {"": v3.provenance.reader_model} and v3.named_readers == [""]
    shipped = load_weights(SHIPPED_VOTER)  # eor-voter/5: both readers, and a fallback over the default one's
    assert set(shipped.readers) == {"", "1.5B"} and shipped.fallback.named_readers == [""]


def test_a_v5_file_must_record_every_reader_and_a_fallback_must_read_with_one(tmp_path):
    from tests.voter.conftest import ONE_READER_POOL, TWO_READER_POOL, reader_voter

    d = reader_voter().to_dict()
    d["readers"].pop("1.5B")
    with pytest.raises(ValueError, match=r"no model recorded for reader\(s\) \['1.5B'\]"):
        SavedWeights.from_dict(d)
    d = reader_voter().to_dict()
    d["readers"][""] = "another-reader"
    with pytest.raises(ValueError, match="provenance.reader_model"):
        SavedWeights.from_dict(d)
    d = reader_voter(fallback=reader_voter(ONE_READER_POOL, readers={})).to_dict()
    d["fallback"]["pool"] = list(TWO_READER_POOL)
    d["fallback"]["weights"] = reader_voter().to_dict()["weights"]
    with pytest.raises(ValueError, match="malformed voter file: fallback: a single-reader voter"):
        SavedWeights.from_dict(d)
    d["fallback"] = {"format": "eor-voter/2"}
    with pytest.raises(ValueError, match="^malformed voter file: fallback: KeyError: .weights.$"):
        SavedWeights.from_dict(d)
