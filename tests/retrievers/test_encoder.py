"""The sentence encoder: package-shipped model resolution, lazy load, normalised vectors."""
from __future__ import annotations

import os

import numpy as np
import pytest

from retrievers.encoder import DEFAULT_ENCODER, Encoder, resolve_encoder_path


def test_default_resolves_to_the_packaged_model_folder():
    path = resolve_encoder_path(DEFAULT_ENCODER)
    assert os.path.isdir(path)


def test_unknown_package_says_what_to_install():
    with pytest.raises(FileNotFoundError, match="pip install no-such-encoder-pkg"):
        resolve_encoder_path("package:no_such_encoder_pkg")


def test_missing_folder_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="encoder folder not found"):
        resolve_encoder_path(str(tmp_path / "nope"))
    assert resolve_encoder_path(str(tmp_path)) == str(tmp_path)


def test_constructor_is_cheap():
    enc = Encoder()
    assert enc._model is None  # loads on first use, not at construction


@pytest.mark.slow
def test_real_encoder_gives_normalised_vectors_and_meaningful_cosines(encoder):
    vecs = encoder.encode(["Who painted the Mona Lisa?", "Leonardo da Vinci painted the Mona Lisa.",
                           "Glaciers are slow rivers of ice."])
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32 and encoder.dim == 384
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-5)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2] + 0.2
    empty = encoder.encode([])
    assert empty.shape == (0, 384)


@pytest.mark.slow
def test_corpus_embeddings_in_bf16_match_float32_and_queries_do_not_depend_on_their_batch():
    texts = ["The Mona Lisa is a portrait by Leonardo da Vinci.", "Jupiter is the largest planet.",
             "A glacier is a persistent body of dense ice that moves slowly under its own weight, " * 4]
    fp32 = Encoder(corpus_dtype="float32").encode_corpus(texts)
    bf16 = Encoder(corpus_dtype="bfloat16").encode_corpus(texts)
    assert ((fp32 * bf16).sum(1) > 0.999).all()
    enc = Encoder(memo_size=0)  # every call embeds: the batch must not move a vector
    alone = enc.encode([texts[0]])[0]
    batched = enc.encode(texts)[0]
    np.testing.assert_allclose(alone, batched, atol=1e-5)
    remembered = Encoder()
    remembered.encode([texts[1]])
    np.testing.assert_allclose(remembered.encode(texts), enc.encode(texts), atol=1e-5)
    assert remembered.memo_hits == 1


def test_memo_embeds_each_text_once_and_keeps_only_the_newest(monkeypatch):
    enc = Encoder(memo_size=3)
    seen: list[list[str]] = []

    def fake(texts, show_progress):
        seen.append(list(texts))
        return np.array([[float(len(t)), 1.0] for t in texts], dtype=np.float32)
    monkeypatch.setattr(enc, "_encode_queries", fake)
    first = enc.encode(["a", "bb", "a"])
    assert seen == [["a", "bb"]]  # a text twice in one call is embedded once
    np.testing.assert_array_equal(first[:, 0], [1, 2, 1])
    enc.encode(["bb", "ccc", "dddd"])  # bb from the memo; the memo holds 3: "a" is evicted
    assert seen[-1] == ["ccc", "dddd"] and enc.memo_hits == 1
    enc.encode(["a"])
    assert seen[-1] == ["a"]
    assert enc.encode([]).shape[0] == 0
