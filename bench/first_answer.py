"""The first answer on a machine with no index: the whole index first, against SE first and Wiki beside.

    python -m bench.first_answer [--question "who painted the mona lisa"] [--out var/bench/first-answer.json]

Each way in a fresh EOR_HOME (the readers linked from the model cache: `eor models prepare`, not
timed), over the embedded corpus, one after the other in one run:
- "whole index first" (setup until this stage): `eor index`, then `eor ask --local Q --json`;
- "SE first" (setup now): `eor index --sources SE`, then `eor index` in the background and at once
  `eor ask --local Q --json`, whose reader engines start while Wiki is embedded; a round that
  reads Wiki would wait for it.
Reported: seconds to the answer, the answer, the stage it settled at, and when the Wiki index was done.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import emit_json

MODELS = ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")


def _eor(*args: str, env: dict) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(Path(sys.executable).parent / "eor"), *args], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"eor {' '.join(args)} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return proc


def one_way(se_first: bool, question: str) -> dict:
    home = tempfile.mkdtemp(prefix="eor-first-")
    env = {**os.environ, "EOR_HOME": home}
    _eor("models", "prepare", *MODELS, env=env)
    t0 = time.time()
    background = None
    if se_first:
        _eor("index", "--sources", "SE", env=env)
        index_s = time.time() - t0
        background = subprocess.Popen([str(Path(sys.executable).parent / "eor"), "index"], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    else:
        _eor("index", env=env)
        index_s = time.time() - t0
    answer = json.loads(_eor("ask", "--local", question, "--json", env=env).stdout)
    answered_s = time.time() - t0
    wiki_done = (Path(home) / "indexes" / "default" / "wiki" / "meta.json").exists()
    if background is not None:
        background.wait()
    return {"way": "SE first, Wiki beside" if se_first else "whole index first",
            "index_step_s": round(index_s, 1), "first_answer_s": round(answered_s, 1),
            "wiki_done_before_the_answer": wiki_done, "all_done_s": round(time.time() - t0, 1),
            "answer": answer["answer"], "settled_at_stage": answer["stopped_at_stage"], "stages": answer["stages"]}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--question", default="who painted the mona lisa")
    ap.add_argument("--out", type=Path, default=Path("var/bench/first-answer.json"))
    args = ap.parse_args(argv)
    report = {"question": args.question, "cores": os.cpu_count(),
              "ways": [one_way(False, args.question), one_way(True, args.question)]}
    emit_json(report, args.out)
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
