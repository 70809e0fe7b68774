"""bench/scale_1m.sh: issue 54's 1M steps in order, each skipped once its report exists. Run against a copy
whose commands are fakes that log their arguments and write the report each step is judged by."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "scale_1m.sh"

FAKE = """#!/usr/bin/env bash
echo "$(basename "$0") $*" >> "$CALLS"
args=" $* "
[ -n "${FAIL:-}" ] && [[ "$args" == *" $FAIL "* ]] && exit 1
case "$args" in
  *" bench.scale_corpus "*) touch var/corpora/scale-1m.jsonl.gz ;;
  *" index --corpus "*) mkdir -p var/indexes/scale-1m && touch var/indexes/scale-1m/index.json ;;
  *" bench.scale_index "*) touch var/bench/scale/scale-1m.json ;;
esac
"""
MEMORY = """#!/usr/bin/env bash
echo "memory_run.sh $*" >> "$CALLS"
touch "${4:-var/bench/scale/memory-$1.json}"
"""


def fake_checkout(tmp: Path) -> Path:
    (tmp / "bench").mkdir()
    (tmp / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(SCRIPT, tmp / "bench" / "scale_1m.sh")
    for path, text in ((".venv/bin/python", FAKE), (".venv/bin/eor", FAKE), ("bench/memory_run.sh", MEMORY),
                       ("bench/scale_quality.sh", 'echo "scale_quality.sh $*" >> "$CALLS"\n')):
        (tmp / path).write_text(text if text.startswith("#!") else "#!/usr/bin/env bash\n" + text)
        (tmp / path).chmod((tmp / path).stat().st_mode | stat.S_IEXEC)
    return tmp


def run(checkout: Path, fail: str = "") -> tuple[subprocess.CompletedProcess, list[str]]:
    calls = checkout / "calls.log"
    calls.write_text("")
    env = {k: v for k, v in os.environ.items() if k != "EOR_HOME"} | {"CALLS": str(calls), "FAIL": fail}
    out = subprocess.run(["bash", str(checkout / "bench" / "scale_1m.sh"), "50"], capture_output=True, text=True,
                         env=env, timeout=60)
    lines = calls.read_text().splitlines()
    watchers = [c for c in lines if "bench.service_memory" in c]  # beside the build, in the background
    assert all("--watch" in c for c in watchers)
    return out, [c for c in lines if c not in watchers]


@pytest.mark.skipif(not Path("/usr/bin/time").exists(), reason="the build step runs under /usr/bin/time")
def test_every_step_runs_in_order_then_only_the_quality_eval_which_resumes_itself(tmp_path):
    checkout = fake_checkout(tmp_path)
    out, calls = run(checkout)
    assert out.returncode == 0 and "every step done" in out.stdout, out.stderr
    assert "--watch 10 --out var/bench/scale/build-1m-tree.json" in (checkout / "calls.log").read_text()
    assert [c.split()[:2] for c in calls] == [
        ["python", "-m"], ["eor", "index"], ["python", "-m"], ["memory_run.sh", "scale-1m"],
        ["memory_run.sh", "scale-1m"], ["scale_quality.sh", "50"]]
    assert "bench.scale_corpus --size 1000000" in calls[0] and "bench.scale_index --index scale-1m" in calls[2]
    assert "--time-log var/bench/scale/build-1m-final.time" in calls[2]
    assert calls[3] == "memory_run.sh scale-1m 1572" and calls[4].startswith("memory_run.sh scale-1m 1576 - ")
    assert calls[5] == "scale_quality.sh 50 shared scale-1m"
    assert run(checkout)[1] == ["scale_quality.sh 50 shared scale-1m"]
    assert (checkout / "var/bench/scale/build-1m-final.time").stat().st_size > 0  # what --time-log reads


@pytest.mark.skipif(not Path("/usr/bin/time").exists(), reason="the build step runs under /usr/bin/time")
def test_a_build_that_stops_stops_the_chain_and_says_where_to_look(tmp_path):
    out, calls = run(fake_checkout(tmp_path), fail="index")
    assert out.returncode != 0 and "var/logs/index-1m.log" in out.stdout
    assert [c.split()[0] for c in calls] == ["python", "eor"]  # nothing after the build


QUALITY_EOR = """#!/usr/bin/env bash
echo "eor $*" >> "$CALLS"
args=" $* "
case "$args" in
  *" index --corpus "*) mkdir -p var/indexes/shared && touch var/indexes/shared/index.json ;;
  *" eval "*) out=$(echo "$args" | sed 's/.*--out-dir \\([^ ]*\\).*/\\1/'); mkdir -p "$out"; touch "$out/eval.json" "$out/questions.jsonl" ;;
esac
"""


def test_the_quality_eval_builds_the_shared_index_once_then_both_evals_once(tmp_path):
    (tmp_path / "bench").mkdir()
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(SCRIPT.with_name("scale_quality.sh"), tmp_path / "bench" / "scale_quality.sh")
    eor = tmp_path / ".venv" / "bin" / "eor"
    eor.write_text(QUALITY_EOR)
    eor.chmod(eor.stat().st_mode | stat.S_IEXEC)
    calls = tmp_path / "calls.log"
    env = {k: v for k, v in os.environ.items() if k != "EOR_HOME"} | {"CALLS": str(calls)}

    python = tmp_path / ".venv" / "bin" / "python"
    python.write_text('#!/usr/bin/env bash\necho "python $*" >> "$CALLS"\n')
    python.chmod(python.stat().st_mode | stat.S_IEXEC)

    def quality(*indexes: str) -> list[str]:
        calls.write_text("")
        out = subprocess.run(["bash", str(tmp_path / "bench" / "scale_quality.sh"), "20", *indexes], env=env,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return calls.read_text().splitlines()

    first = quality("shared")
    assert [c.split()[1] for c in first] == ["index", "eval", "eval"]  # the 14k index first, where it is missing
    assert "--corpus ../shared/data/corpus.jsonl --index shared" in first[0]
    assert all("--index shared" in c and "--limit 20" in c and "--split-by question" in c for c in first[1:])
    assert quality("shared") == []  # every report there: nothing again
    both = quality("shared", "big")  # the second index's evals, then each paired with the first's
    assert [c.split()[1] for c in both] == ["eval", "eval", "-m", "-m"] and all("--index big" in c for c in both[:2])
    assert ("bench.paired_evals var/bench/scale-quality/shared/singles/questions.jsonl "
            "var/bench/scale-quality/big/singles/questions.jsonl") in both[2] and "--system EoR" in both[3]
