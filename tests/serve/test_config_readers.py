"""The `readers` section: named readers besides the default, each its own engine settings;
the pool may name only configured readers; only the readers a member names get an engine."""
from __future__ import annotations

import pytest

from retrievers.spec import PAPER_POOL
from serve.config import DEFAULT_POOL, config_from_dict
from serve.config_readers import reader_config, reader_names, used_readers
from serve.engine.models import STRONG_READER
from voter.weights_io import SHIPPED_VOTER, load_weights


def test_the_strong_reader_is_started_only_when_a_member_names_it():
    paper = config_from_dict({"pool": {"specs": list(PAPER_POOL)}})
    assert reader_names(paper) == ["", "1.5B"] and reader_config(paper, "1.5B").model == STRONG_READER
    assert used_readers(paper) == [""]  # the paper's pool: the default reader only
    paired = config_from_dict({"pool": {"specs": ["Wiki@10", "SE@1~1.5B"]}})
    assert used_readers(paired) == ["", "1.5B"]


def test_the_default_pool_is_the_shipped_voters_both_readers_with_the_15bs_small_kv_cache():
    plain = config_from_dict({})
    assert used_readers(plain) == ["", "1.5B"] and plain.pool.specs == DEFAULT_POOL
    assert list(DEFAULT_POOL[:16]) == list(PAPER_POOL) and all(s.endswith("~1.5B") for s in DEFAULT_POOL[16:])
    assert reader_config(plain, "1.5B").cpu_kv_cache_gib == 1
    assert (reader_config(plain, "").cpu_nice, reader_config(plain, "1.5B").cpu_nice) == (0, 10)  # the quick reader first
    assert len(config_from_dict({"pool": {"max_question_chars": 3000}}).pool.specs) == len(DEFAULT_POOL)
    kv = config_from_dict({"readers": {"1.5B": {"cpu_kv_cache_gib": 2}}})  # a default reader's line changes what it names
    assert (reader_config(kv, "1.5B").model, reader_config(kv, "1.5B").cpu_kv_cache_gib) == (STRONG_READER, 2)
    named = config_from_dict({"readers": {"1.5B": STRONG_READER}})
    assert reader_config(named, "1.5B").cpu_kv_cache_gib == 1 and config_from_dict(named.to_dict()) == named
    assert tuple(load_weights(SHIPPED_VOTER, pool=list(DEFAULT_POOL)).pool) == DEFAULT_POOL


def test_a_reader_takes_the_default_readers_settings_unless_it_sets_its_own():
    c = config_from_dict({"reader": {"cpu_kv_cache_gib": 4}, "readers": {"big": {"model": "m", "seed": 3}, "b": "n"}})
    assert (reader_config(c, "big").model, reader_config(c, "big").seed, reader_config(c, "big").cpu_kv_cache_gib) \
        == ("m", 3, 4)
    assert reader_config(c, "b").model == "n" and reader_config(c, "").cpu_kv_cache_gib == 4
    assert reader_config(config_from_dict(c.to_dict()), "big") == reader_config(c, "big")  # travels to actors
    assert reader_names(c) == ["", "1.5B", "big", "b"]  # a file's readers join the default ones


@pytest.mark.parametrize("section, message", [
    ({"pool": {"specs": ["Wiki@10~3B"]}}, "names reader '3B', which is not configured"),
    ({"readers": {"x y": "m"}}, "bad reader name 'x y'"),
    ({"readers": {"big": {"modle": "m"}}}, r"unknown key readers\.big\.modle \(did you mean readers\.big\.model\?\)"),
    ({"readers": {"big": ""}}, r"readers.big must be a model name"),
    ({"readers": ["m"]}, "section .readers. must be a mapping"),
])
def test_a_readers_section_that_does_not_fit_is_one_clear_error(section, message):
    with pytest.raises(ValueError, match=message):
        config_from_dict(section)


def test_an_unconfigured_reader_is_refused_by_name():
    with pytest.raises(KeyError, match="reader '3B' is not configured"):
        reader_config(config_from_dict({}), "3B")


def test_the_default_reader_has_the_cores_first_only_where_every_other_reader_it_runs_beside_yields():
    from serve.config_readers import quick_reader_first

    plain = config_from_dict({})
    assert quick_reader_first(plain)
    assert not quick_reader_first(plain, ["Wiki@10", "SE@1"])  # no other reader: no early answer to favour
    assert not quick_reader_first(config_from_dict({"readers": {"1.5B": {"cpu_nice": 0}}}))
    assert not quick_reader_first(config_from_dict({"reader": {"cpu_nice": 10}}))  # the same niceness: shared


def test_a_niceness_outside_0_to_19_is_refused():
    with pytest.raises(ValueError, match="cpu_nice must be 0 to 19"):
        config_from_dict({"readers": {"1.5B": {"cpu_nice": 20}}})
