"""answers/: the one definition of normalisation, EM and Match, read by the voter and by the
robustness bench (whose environment has none of the server's packages): standard library only."""
from __future__ import annotations

from pathlib import Path

import pytest

import answers
from tests.stdlib_only import non_stdlib_imports

ANSWERS_DIR = Path(answers.__file__).resolve().parent


def test_answers_imports_the_standard_library_only():
    assert non_stdlib_imports(ANSWERS_DIR) == []


@pytest.mark.parametrize("text, normalised", [("The Eiffel Tower.", "eiffel tower"), ("  A  cat,  an owl ", "cat owl"),
                                              ("*", ""), ("Théâtre", "théâtre")])
def test_normalisation_is_squads(text, normalised):
    assert answers.normalize_answer(text) == normalised


def test_exact_match_and_match():
    assert answers.exact_match("the Eiffel tower!", ["Eiffel Tower"]) and not answers.exact_match("tower", ["Eiffel Tower"])
    assert answers.match("it is the Eiffel Tower in Paris", ["eiffel tower"])
    assert answers.match("born 1990", ["1"]) and not answers.match("born 1990", ["1"], word_boundary=True)
    # a gold that normalises to nothing (the data has one: "*") is right for nothing, empty output included
    assert not answers.exact_match("", ["*"]) and not answers.match("", ["*"]) and not answers.match("x", [])


def test_the_voter_and_the_bench_score_with_it():
    from bench.robust import qa
    from voter import normalize, qa_metrics

    assert normalize.normalize_answer is answers.normalize_answer is qa.normalize_answer
    assert qa.exact_match is answers.exact_match and qa.match is answers.match
    for pred, golds in (("Paris, France", ["paris"]), ("paris", ["Paris"]), ("", ["*"]), ("1990", ["1"])):
        assert qa_metrics.match(pred, golds) == float(answers.match(pred, golds))
        assert qa_metrics.exact_match(pred, golds) == float(answers.exact_match(pred, golds))


def test_match_on_whole_tokens_what_the_fit_and_the_judging_count():
    from fitting.questions import right, substring_match

    assert substring_match("13 times", ["3"]) and not right("13 times", ["3"])  # the substring test's error
    assert right("3 times", ["3"]) and right("It was 3.", ["3"])
    assert not right("in 1990", ["1"]) and right("in 1990", ["1990"])
    assert right("Washington, D.C.", ["Washington DC"])  # punctuation dropped before matching
    assert right("1,000 people", ["1000"]) and not right("10,000 people", ["1000"])
    assert right("The Beatles", ["Beatles"]) and not right("Beatlesque", ["Beatles"])
    assert not right("anything", ["*"])  # a gold that normalises to nothing matches nothing
