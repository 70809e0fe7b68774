"""bench/verifier_probe.py's pure part: the verifier reads turned into a member's scorer features."""
from __future__ import annotations

import math

import pytest

from bench.verifier_probe import PAIR, p_token, verifier_features

A, B = PAIR


def read(kind, doc, arg, text, p):
    return {"kind": kind, "doc": doc, "arg": arg, "text": text, "lp": [math.log(p)]}


def test_a_two_way_reply_gives_the_other_choice_the_rest_of_the_probability():
    assert p_token(read("check", A, A, "Yes", 0.8), "yes") == pytest.approx(0.8)
    assert p_token(read("check", A, A, " No", 0.8), "yes") == pytest.approx(0.2)
    assert p_token({"text": "Yes", "lp": []}, "yes") == 0.5  # no log-probability: no information


def test_features_follow_each_member_through_both_orders_and_documents():
    reads = [read("check", A, A, "Yes", 0.9), read("check", A, B, "No", 0.6),
             read("check", B, A, "Yes", 0.7), read("check", B, B, "Yes", 0.5),
             # (A) is the first member's answer in order "ab", the second's in "ba": over the first
             # member's document both orders pick the first member, over the second's the second
             read("choose", A, "ab", "A", 0.8), read("choose", A, "ba", "B", 0.6),
             read("choose", B, "ab", "B", 0.7), read("choose", B, "ba", "A", 0.9)]
    f = verifier_features({"reads": reads})
    assert f[A][0] == pytest.approx(0.9) and f[A][1] == pytest.approx((0.9 + 0.7) / 2)
    assert f[B][0] == pytest.approx(0.5) and f[B][1] == pytest.approx((0.4 + 0.5) / 2)
    assert f[A][2] == pytest.approx((0.8 + 0.6 + 0.3 + 0.1) / 4)
    assert f[B][2] == pytest.approx((0.2 + 0.4 + 0.7 + 0.9) / 4)
    assert f[A][2] + f[B][2] == pytest.approx(1.0)  # one choice between two


def test_where_the_two_agree_nothing_was_asked():
    f = verifier_features({"reads": [read("check", A, A, "Yes", 0.9), read("check", B, B, "Yes", 0.8)]})
    assert f[A] == pytest.approx([0.9, 0.9, 1.0]) and f[B] == pytest.approx([0.8, 0.8, 1.0])
