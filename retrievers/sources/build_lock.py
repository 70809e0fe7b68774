"""An index build in progress, as another process sees it.

`eor index` writes its pid in the index folder while it builds (removed when the index is
finished; a build that died leaves a pid no process has, which counts as no build). A source
whose index is still being built is not loaded with the others: the first round that reads it
waits for the build to finish (`wait_for_build`), so `eor ask` answers from the sources that are
ready (SE: Lucene, built first, in seconds) while the dense index is embedded beside the reader
engine's start.
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

LOCK_FILE = "BUILDING"
WAIT_FOR_BUILD_S = 3600.0  # a round waits this long at most for an index being built

log = logging.getLogger(__name__)


def hold(out: Path) -> None:
    """Mark the build as this process's; another live build of the same folder is refused."""
    other = builder_pid(out)
    if other is not None and other != os.getpid():
        raise ValueError(f"another eor index (pid {other}) is building the index at {out}: wait for it, or stop it "
                         "(it resumes where it stopped)")
    (out / LOCK_FILE).write_text(str(os.getpid()))


def release(out: Path) -> None:
    (out / LOCK_FILE).unlink(missing_ok=True)


def builder_pid(out: str | Path) -> int | None:
    """The pid of the live process building the index at `out`, or None."""
    try:
        pid = int((Path(out) / LOCK_FILE).read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def wait_for_build(out: str | Path, done: Path, name: str, limit_s: float = WAIT_FOR_BUILD_S) -> None:
    """Until `done` exists, while a live process builds the index at `out` (at most `limit_s`)."""
    t0 = time.time()
    said = False
    while not done.exists() and builder_pid(out) is not None and time.time() - t0 < limit_s:
        if not said:
            log.warning("eor: the %s index at %s is still being built (eor index, pid %s): waiting for it",
                        name, out, builder_pid(out))
            said = True
        time.sleep(1.0)
