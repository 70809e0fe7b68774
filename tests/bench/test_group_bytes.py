"""bench/group_bytes.py on a fake pool: a group is sent less than the whole record, and the answers
do not change."""
import pytest


def test_groups_get_less_and_answer_the_same(monkeypatch):
    pytest.importorskip("vllm")  # the server's environment (the bench imports serve/)
    from bench.group_bytes import _view, ask_all
    from tests.serve.conftest import FakePool
    from voter.question_vote import MetricOptions, build_metrics, equal_weights, VoterChoice

    specs = ["Wiki@10", "SE@1", "PK"]
    pool = FakePool(specs, lambda q: {"Wiki@10": "paris", "SE@1": "paris", "PK": "lyon"})
    saved = equal_weights(specs, ["em"])
    choice = VoterChoice(saved, MetricOptions.parse("em", None), "equal weights")
    metrics = build_metrics(choice.options, None)
    qs = ["capital of france?", "largest city of france?"]
    trimmed, after = ask_all(pool, choice, metrics, qs, send_whole=False)
    whole, before = ask_all(pool, choice, metrics, qs, send_whole=True)
    assert [_view(a) for a in trimmed] == [_view(b) for b in whole]
    assert after["group_calls"] == before["group_calls"] == 2 * len(specs)
    assert after["bytes_sent"] <= before["bytes_sent"] == before["bytes_whole_record"]
