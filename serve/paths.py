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
