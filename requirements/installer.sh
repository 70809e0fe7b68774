# Sourced by setup.sh and bench/setup.sh: which installer puts the pinned packages into a venv.
# uv (pinned in requirements/uv.txt, installed into the venv by its own pip) installs .venv's
# locked set with an empty cache in ~40-55 s where pip takes ~190 s
# (docs/notes/2026-11-26-installer.md); pip stays the fallback where uv cannot be installed, or
# when EOR_INSTALLER=pip. uv writes no .pyc at install, and where PYTHONDONTWRITEBYTECODE is set (as on
# these machines) no import writes one either: every process then compiles torch and vllm again
# (~50 s each for a vLLM engine's three processes on the 2-core Xeon). compile_bytecode does it once.
# uv reads no pip configuration, so the indexes, find-links and constraint files pip is set up
# with (`pip config list`: the machine's CPU torch wheel, for one) are handed to it, and it picks
# versions across all of them as pip does (--index-strategy unsafe-best-match).

# uv_args_from_pip PYTHON: pip's configured indexes, find-links and constraints as uv options,
# one word a line (as in pip, PIP_* variables win over the files' [install], that over [global])
uv_args_from_pip() {
  "$1" - <<'EOF'
import ast, subprocess, sys
flags = {"index-url": "--index-url", "extra-index-url": "--extra-index-url",
         "find-links": "--find-links", "constraint": "--constraint"}
rank = {"global": 0, "install": 1, ":env:": 2}
listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                        capture_output=True, text=True, check=True).stdout
settings = {}  # name: (rank, values)
for line in listed.splitlines():
    key, _, value = line.partition("=")
    section, _, name = key.rpartition(".")
    if section in rank and name in flags and rank[section] >= settings.get(name, (-1,))[0]:
        settings[name] = (rank[section], ast.literal_eval(value).split())
for name, (_, values) in settings.items():
    for value in values:
        print(flags[name], value, sep="\n")
EOF
}

# installer_for VENV: sets pkg_install / pkg_uninstall / pkg_check (commands, as arrays) for VENV,
# with uv when it is there or can be installed; installer_note says why pip was used, if it was
installer_for() {
  local venv=$1 py=$1/bin/python want args=()
  local pip=("$py" -m pip -q --disable-pip-version-check)
  pkg_install=("${pip[@]}" install)
  pkg_uninstall=("${pip[@]}" uninstall -y)
  pkg_check=("${pip[@]}" check)
  installer_note=""
  if [ "${EOR_INSTALLER:-uv}" = pip ]; then installer_note="pip: EOR_INSTALLER=pip"; return 0; fi
  want=$(grep -o '^uv==[^ ]*' requirements/uv.txt)
  if [ "$("$venv/bin/uv" --version 2>/dev/null | cut -d' ' -f2)" != "${want#uv==}" ]; then
    local said  # pip's warnings (indexes without uv) only matter when it fails
    if ! said=$("${pip[@]}" install -r requirements/uv.txt 2>&1); then
      echo "$said" >&2
      installer_note="pip: uv could not be installed"
      return 0
    fi
  fi
  mapfile -t args < <(uv_args_from_pip "$py")
  local uv=("$venv/bin/uv" pip)
  pkg_install=("${uv[@]}" install -q --python "$py" --index-strategy unsafe-best-match "${args[@]}")
  pkg_uninstall=("${uv[@]}" uninstall -q --python "$py")
  pkg_check=("${uv[@]}" check -q --python "$py")
}

# compile_bytecode PYTHON [DIR...]: the .pyc of every module in PYTHON's site-packages and under each
# DIR (current ones skipped: ~17 s for .venv when nothing changed). A file that does not compile
# (Python 2 leftovers some packages ship) is said in the output and fails nothing: its import
# would fail the same way.
compile_bytecode() {
  local py=$1 site
  shift
  site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$py" -m compileall -q -j 0 "$site" "$@" || echo "compileall: the files above did not compile (importing them fails the same way)"
}
