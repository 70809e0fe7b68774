"""`eor`'s own failures: a reader engine that dies mid-run is one line in the project's words,
with the way to resume; the traceback goes to the log (serve/cli/__init__.py: `main`)."""
from __future__ import annotations

import pytest

import serve.cli
from serve.cli import main
from serve.cli.console import log_path


def test_a_dead_engine_ends_eor_run_in_one_line_and_the_log_keeps_the_traceback(eor_home, monkeypatch, capsys):
    from vllm.v1.engine.exceptions import EngineDeadError

    def run_until_the_engine_dies(args):
        try:
            raise EngineDeadError()
        except EngineDeadError as inner:  # as the pool sees it: wrapped by the reader's call
            raise RuntimeError("generate failed") from inner
    monkeypatch.setattr(serve.cli, "cmd_run", run_until_the_engine_dies)
    assert main(["run", "--questions", "q.jsonl"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "See stack trace" not in err
    assert err.startswith("eor: error: reader engine down (EngineDeadError: its engine process stopped); "
                          "run the command again (a run keeps its finished questions in its run log and resumes")
    assert "Traceback" in log_path().read_text() and "EngineDeadError" in log_path().read_text()


@pytest.mark.parametrize("error", [RuntimeError("a bug"), BrokenPipeError("stdout closed")])  # `eor eval --json | head`
def test_any_other_failure_is_not_called_a_dead_engine(eor_home, monkeypatch, error):
    def fails(args):
        raise error
    monkeypatch.setattr(serve.cli, "cmd_run", fails)
    with pytest.raises(type(error)):
        main(["run", "--questions", "q.jsonl"])


def test_eor_raises_its_open_file_limit_to_the_hard_one():
    """A 1M dense index reads from 524 files by row: the soft limit must not fail a search (Ray's workers do the same)."""
    import resource

    from serve.cli.common import open_files_to_hard_limit

    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    if before[1] != resource.RLIM_INFINITY and before[1] <= 256:
        pytest.skip(f"a hard limit of {before[1]}: nothing to raise to")
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, before[1]))
        assert open_files_to_hard_limit() == before[1] == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, before)
