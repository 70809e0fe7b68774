"""Where eor keeps what it builds: models, indexes, the reader cache ($EOR_HOME, default ./var
of the checkout)."""
from __future__ import annotations

import os
from pathlib import Path


def eor_home() -> Path:
    env = os.environ.get("EOR_HOME")
    return Path(env) if env else Path(__file__).resolve().parents[1] / "var"


def models_dir() -> Path:
    return eor_home() / "models"


def converted_models_cache() -> Path | None:
    """A machine-wide store of converted reader models ($EOR_MODEL_CACHE, default ~/.cache/eor/models;
    "off": none): a fresh checkout on a machine that converted a model once links it instead of
    converting it again (the three models: about 4 min of a fresh setup; CI clones afresh)."""
    env = os.environ.get("EOR_MODEL_CACHE", "")
    if env == "off":
        return None
    return Path(env) if env else Path.home() / ".cache" / "eor" / "models"


def indexes_dir() -> Path:
    return eor_home() / "indexes"


def cache_path() -> Path:
    return eor_home() / "cache" / "reader.sqlite"


def pushed_voter_path() -> Path:
    """The last voter pushed to the live service (eor fit --push): loaded again after a restart."""
    return eor_home() / "voter" / "pushed.json"


def source_commit() -> str | None:
    """The checkout's commit (with "+changes" when the tree differs from it), recorded in a voter
    file so that a figure can be traced to the code that fitted it; None outside a git checkout."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+changes" if dirty else "") if head else None
