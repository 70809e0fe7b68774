"""The retriever-spec parser: the paper's 16 specs, operator precedence, and errors that name
the bad token."""
from __future__ import annotations

import pytest

from retrievers.spec import (PAPER_POOL, RetrieverPlan, SpecError, Term, check_source_name, check_sources, parse_pool,
                             parse_spec)

# spec -> (terms, compress), written out by hand from the paper's Appendix C.1
EXPECTED = {
    "Wiki@10": ((Term("Wiki", False, 10),), False),
    "SE@1": ((Term("SE", False, 1),), False),
    "SE@4": ((Term("SE", False, 4),), False),
    "PK": ((Term("PK", False, None),), False),
    "SE@RR@10": ((Term("SE", True, 10),), False),
    "SE@2&Wiki@5": ((Term("SE", False, 2), Term("Wiki", False, 5)), False),
    "SE@RR@5&Wiki@5": ((Term("SE", True, 5), Term("Wiki", False, 5)), False),
    "HB@RR@10": ((Term("HB", True, 10),), False),
    "Wiki@10@CP": ((Term("Wiki", False, 10),), True),
    "SE@1@CP": ((Term("SE", False, 1),), True),
    "SE@4@CP": ((Term("SE", False, 4),), True),
    "SE@RR@10@CP": ((Term("SE", True, 10),), True),
    "SE@2&Wiki@5@CP": ((Term("SE", False, 2), Term("Wiki", False, 5)), True),
    "SE@RR@5&Wiki@5@CP": ((Term("SE", True, 5), Term("Wiki", False, 5)), True),
    "HB@RR@10@CP": ((Term("HB", True, 10),), True),
    "ReFree": ((), False),
}


def test_paper_pool_is_the_papers_16_specs_in_order():
    assert PAPER_POOL == (
        "Wiki@10", "SE@1", "SE@4", "PK", "SE@RR@10", "SE@2&Wiki@5", "SE@RR@5&Wiki@5", "HB@RR@10",
        "Wiki@10@CP", "SE@1@CP", "SE@4@CP", "SE@RR@10@CP", "SE@2&Wiki@5@CP", "SE@RR@5&Wiki@5@CP",
        "HB@RR@10@CP", "ReFree")
    assert len(set(PAPER_POOL)) == 16
    # every one but PK and ReFree also comes with @CP
    plain = [s for s in PAPER_POOL if not s.endswith("@CP")]
    assert sorted(s + "@CP" for s in plain if s not in ("PK", "ReFree")) == sorted(
        s for s in PAPER_POOL if s.endswith("@CP"))


@pytest.mark.parametrize("spec", PAPER_POOL)
def test_paper_specs_parse_to_their_plans(spec):
    terms, compress = EXPECTED[spec]
    plan = parse_spec(spec)
    assert plan == RetrieverPlan(spec, terms, compress)


def test_precedence_rerank_then_topk_then_concat_then_compress():
    plan = parse_spec("SE@RR@5&Wiki@5@CP")
    assert plan.terms == (Term("SE", rerank=True, k=5), Term("Wiki", rerank=False, k=5))
    assert plan.compress is True
    assert plan.sources == {"SE", "Wiki"}
    assert not plan.retrieval_free


def test_refree_is_retrieval_free_and_pk_has_no_k():
    refree = parse_spec("ReFree")
    assert refree.retrieval_free and refree.terms == () and not refree.compress
    assert refree.sources == set()
    pk = parse_spec("PK")
    assert not pk.retrieval_free and pk.terms == (Term("PK", False, None),) and pk.sources == {"PK"}


def test_rerank_without_k_and_surrounding_whitespace():
    assert parse_spec("SE@RR").terms == (Term("SE", True, None),)
    plan = parse_spec("  Wiki@3 ")
    assert plan.spec == "Wiki@3" and plan.terms == (Term("Wiki", False, 3),)


def test_parse_pool_keeps_order():
    plans = parse_pool(list(PAPER_POOL))
    assert [p.spec for p in plans] == list(PAPER_POOL)


@pytest.mark.parametrize("spec, names", [
    ("SE@XX", ["'@XX'", "unknown operation"]),
    ("SE@CP&Wiki@5", ["@CP", "'SE@CP'"]),
    ("SE@5@RR", ["@RR", "'SE@5@RR'"]),
    ("SE@0", ["'@0'", "top-k"]),
    ("SE@2@3", ["'@3'", "top-k"]),
    ("SE@1&", ["empty operand", "&"]),
    ("&Wiki@5", ["empty operand"]),
    ("SE@RR@RR", ["@RR"]),
    ("PK@3", ["PK", "'PK@3'"]),
    ("PK@RR", ["PK", "'PK@RR'"]),
    ("SE@1 & Wiki@5", ["'SE@1 '"]),
    ("SE@-1", ["'SE@-1'"]),
])
def test_errors_name_the_bad_token(spec, names):
    with pytest.raises(SpecError) as err:
        parse_spec(spec)
    msg = str(err.value)
    for name in names:
        assert name in msg, msg


@pytest.mark.parametrize("spec", ["", "   "])
def test_empty_spec_is_an_error(spec):
    with pytest.raises(SpecError, match="empty"):
        parse_spec(spec)


def test_spec_error_is_a_value_error():
    assert issubclass(SpecError, ValueError)


def test_duplicate_spec_in_a_pool_is_an_error_naming_it():
    with pytest.raises(SpecError, match=r"'SE@1'.*twice"):
        parse_pool(["SE@1", "Wiki@10", " SE@1"])


def test_a_bad_spec_anywhere_in_the_pool_fails_the_pool():
    with pytest.raises(SpecError, match="'Foo@'"):
        parse_pool(["SE@1", "Foo@"])


def test_sources_are_whatever_is_configured_plus_pk_and_hb():
    """The grammar takes any source name; the configured set decides which exist."""
    assert parse_spec("Toy@2").terms == (Term("Toy", False, 2),)
    assert [p.spec for p in parse_pool(["Toy@2", "HB@RR@3", "PK", "ReFree"], sources=("Toy",))] == [
        "Toy@2", "HB@RR@3", "PK", "ReFree"]
    with pytest.raises(SpecError) as err:
        parse_pool(["SE@1", "Foo@3"], sources={"Wiki": 1, "SE": 2})
    assert str(err.value) == "unknown knowledge source 'Foo' in retriever spec 'Foo@3'; known: Wiki, SE, PK, HB"
    with pytest.raises(SpecError, match="'Wiki'"):
        check_sources([parse_spec("SE@2&Wiki@5")], ["SE"])


@pytest.mark.parametrize("name", ["PK", "HB", "ReFree", "Wiki2", "my_source", "", "Toy@2"])
def test_a_configured_source_name_is_letters_and_not_reserved(name):
    with pytest.raises(SpecError, match="letters only"):
        check_source_name(name)
    assert check_source_name("Toy") == "Toy"


def test_parse_spec_is_parsed_once_and_bad_specs_still_raise():
    assert parse_spec("SE@RR@5&Wiki@5@CP") is parse_spec("SE@RR@5&Wiki@5@CP")
    for _ in range(2):  # a failure is not cached as a result
        with pytest.raises(SpecError):
            parse_spec("SE@")


@pytest.mark.parametrize("spec,steps", [("SE@1", 1), ("SE@2&Wiki@5", 1), ("ReFree", 1), ("SE@1@CP", 2),
                                        ("PK", 2), ("HB@RR@10", 2), ("HB@RR@10@CP", 3)])
def test_reader_steps_count_the_reader_calls_before_the_answer(spec, steps):
    assert parse_spec(spec).reader_steps == steps
