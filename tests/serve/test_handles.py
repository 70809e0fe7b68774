"""serve/app/handles.py: a remote call never waits past the Ask's Deadline, and one that would
is cancelled (so the deployment behind it stops: the reader aborts its requests)."""
from __future__ import annotations

import pytest

from retrievers.reader import SamplingParams
from serve.app.handles import RemoteReader, working_for
from serve.deadline import Deadline


class _Response:
    def __init__(self, log):
        self.log = log

    def result(self, timeout_s=None):
        self.log.append(("wait", timeout_s))
        raise TimeoutError("timed out")

    def cancel(self):
        self.log.append(("cancel", None))


class _Method:
    def __init__(self, log):
        self.log = log

    def remote(self, *args):
        return _Response(self.log)


class _Handle:
    def __init__(self):
        self.log = []
        self.generate = _Method(self.log)


def test_a_call_past_the_deadline_is_cancelled_and_waits_no_longer_than_the_deadline():
    handle = _Handle()
    engine = RemoteReader(handle, timeout_s=120.0)
    with working_for(Deadline.after(2.0)), pytest.raises(TimeoutError):
        engine.generate(["p"], SamplingParams(max_tokens=4))
    (kind, waited), cancel = handle.log
    assert kind == "wait" and 1.5 < waited <= 2.0 and cancel == ("cancel", None)
    handle.log.clear()
    with pytest.raises(TimeoutError):
        engine.generate(["p"], SamplingParams(max_tokens=4))
    assert handle.log[0] == ("wait", 120.0)  # no deadline: the call's own timeout
