"""The embedded JVM (Lucene) must leave SIGTERM to Python: eor's commands turn it into a clean
stop (the vLLM engine closed, the warm reader's files removed). A JVM started without -Xrs
ends the process at once instead (exit 143, nothing cleaned up)."""
from __future__ import annotations

import subprocess
import sys
import textwrap


def test_sigterm_reaches_python_after_the_jvm_started(tmp_path):
    script = tmp_path / "sigterm.py"
    script.write_text(textwrap.dedent("""
        import os, signal, time

        def stop(signum, frame):
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, stop)
        from retrievers.java import autoclass

        autoclass("java.lang.String")  # the JVM is up
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        except KeyboardInterrupt:
            print("python stopped cleanly")
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "python stopped cleanly" in out.stdout, (out.returncode, out.stderr[-500:])
