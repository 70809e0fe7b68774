"""The machine-wide store of converted models (serve/engine/models.py: prepare_model): a second
checkout on the same machine links the first one's conversion instead of converting again."""
from __future__ import annotations

import os

import pytest

from serve.engine import models


@pytest.fixture
def fake_model(tmp_path, monkeypatch):
    """A packaged model whose conversion writes two files and is counted."""
    calls = []

    def convert(spec, staging):
        calls.append(spec.name)
        staging.mkdir(parents=True)
        (staging / "config.json").write_text('{"model_type": "fake"}')
        (staging / "model.safetensors").write_bytes(b"weights")

    monkeypatch.setitem(models.PACKAGED_MODELS, "fake-1m",
                        models.PackagedModel("fake-1m", "fake-pkg", True, lambda scratch: scratch, "sha-of-gguf"))
    monkeypatch.setattr(models, "_convert", convert)
    monkeypatch.setenv("EOR_MODEL_CACHE", str(tmp_path / "store"))
    return calls


def test_a_second_checkout_links_the_stored_conversion(tmp_path, monkeypatch, fake_model):
    monkeypatch.setenv("EOR_HOME", str(tmp_path / "first"))
    first = models.prepare_model("fake-1m")
    monkeypatch.setenv("EOR_HOME", str(tmp_path / "second"))
    second = models.prepare_model("fake-1m")
    assert fake_model == ["fake-1m"] and second == tmp_path / "second" / "models" / "fake-1m"
    assert (second / "model.safetensors").read_bytes() == b"weights"
    assert os.path.samefile(first / "model.safetensors", second / "model.safetensors")  # linked, not copied
    assert not list((tmp_path / "second" / "models").glob(".*"))  # no staging left behind
    models.prepare_model("fake-1m", force=True)  # force converts again
    assert fake_model == ["fake-1m", "fake-1m"]


def test_the_store_is_keyed_by_source_and_converter_and_can_be_turned_off(tmp_path, monkeypatch, fake_model):
    spec = models.PACKAGED_MODELS["fake-1m"]
    key = models.conversion_key(spec)
    assert key and key != models.conversion_key(models.PackagedModel("fake-1m", "fake-pkg", True, spec.locate_gguf,
                                                                     "another-gguf"))
    monkeypatch.setattr(models, "CONVERSION", models.CONVERSION + 1)
    assert models.conversion_key(spec) != key  # a new conversion never reuses an old copy
    assert models.conversion_key(models.PackagedModel("x", "no-such-package-here", True, spec.locate_gguf)) is None
    monkeypatch.setenv("EOR_MODEL_CACHE", "off")
    for home in ("a", "b"):
        monkeypatch.setenv("EOR_HOME", str(tmp_path / home))
        models.prepare_model("fake-1m")
    assert fake_model == ["fake-1m", "fake-1m"] and not (tmp_path / "store").exists()
