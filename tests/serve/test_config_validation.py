"""The one typed config (issue 56): every section is checked by its schema (serve/config_schema.py),
so a wrong type, a value out of its field's bounds or a misspelt key fails in one line that names
the key's full path (and the nearest known key); valid configs load as before and round-trip."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from serve.config import EorConfig, config_from_dict, load_config

ROOT = Path(__file__).resolve().parents[2]


def refusal(data: dict) -> str:
    with pytest.raises(ValueError) as err:
        config_from_dict(data)
    msg = str(err.value)
    assert "\n" not in msg, msg
    return msg


@pytest.mark.parametrize("data, message", [
    ({"service": {"port": "50051"}}, "config: service.port: should be a valid integer, got '50051'"),
    ({"service": {"port": True}}, "config: service.port: should be a valid integer, got True"),
    ({"service": {"ask_deadline_s": "60"}}, "config: service.ask_deadline_s: should be a valid number, got '60'"),
    ({"service": {"placement": ["Reader"]}}, "config: service.placement: should be an object, got ['Reader']"),
    ({"service": {"placement": {"Reader": {"eor_reader": "one"}}}},
     "config: service.placement.Reader.eor_reader: should be a valid number, got 'one'"),
    ({"service": {"retriever_actors": 2}},
     "config: service.retriever_actors: should be a valid string or a valid array, got 2"),
    ({"pool": {"default_k": "ten"}}, "config: pool.default_k: should be a valid integer, got 'ten'"),
    ({"pool": {"specs": "Wiki@10"}}, "config: pool.specs: should be a valid array, got 'Wiki@10'"),
    ({"pool": {"specs": ["Wiki@10", 3]}}, "config: pool.specs[1]: should be a valid string, got 3"),
    ({"reader": {"max_model_len": 4096.5}}, "config: reader.max_model_len: should be a valid integer, got 4096.5"),
    ({"reader": {"device": "tpu"}}, "config: reader.device: should be 'auto', 'cpu' or 'cuda', got 'tpu'"),
    ({"readers": {"1.5B": {"cpu_nice": "low"}}},
     "config: readers.1.5B.cpu_nice: should be a valid integer, got 'low'"),
    ({"cache": {"enabled": "yes"}}, "config: cache.enabled: should be a valid boolean, got 'yes'"),
    ({"voter": {"metrics": "em"}}, "config: voter.metrics: should be a valid array, got 'em'"),
    ({"index": {"name": 7}}, "config: index.name: should be a valid string, got 7"),
    ({"index": {"sources": {"SE": {"backend": "http", "options": ["fetch_pages"]}}}},
     "config: index.sources.SE.options: should be an object, got ['fetch_pages']"),
    ({"ask": {"keep_warm_s": "5m"}}, "config: ask.keep_warm_s: should be a valid number, got '5m'"),
])
def test_a_value_of_the_wrong_type_is_one_line_naming_its_key(data, message):
    assert refusal(data) == message


@pytest.mark.parametrize("data, message", [
    ({"service": {"port": 70000}}, "config: service.port: should be less than or equal to 65535, got 70000"),
    ({"service": {"http_port": -1}}, "config: service.http_port: should be greater than or equal to 0, got -1"),
    ({"service": {"vote_reserve_s": -1}},
     "config: service.vote_reserve_s: should be greater than or equal to 0, got -1"),
    ({"service": {"max_prompts": 0}}, "config: service.max_prompts: should be greater than or equal to 1, got 0"),
    ({"pool": {"default_k": 0}}, "config: pool.default_k: should be greater than or equal to 1, got 0"),
    ({"reader": {"gpu_memory_utilization": 1.5}},
     "config: reader.gpu_memory_utilization: should be less than or equal to 1, got 1.5"),
    ({"ask": {"keep_warm_s": -1}}, "config: ask.keep_warm_s: should be greater than or equal to 0, got -1"),
    # the sections' own checks keep their messages
    ({"service": {"ask_deadline_s": 0}}, "service: ask_deadline_s and max_batch must be positive"),
    ({"service": {"min_confidence": 2}},
     "service.min_confidence must be a number in [0, 1] (0: always answer), got 2"),
    ({"reader": {"cpu_nice": 30}}, "reader cpu_nice must be 0 to 19, got 30"),
    ({"readers": {"1.5B": {"cpu_nice": 30}}}, "readers.1.5B: reader cpu_nice must be 0 to 19, got 30"),
])
def test_a_value_out_of_its_range_is_one_line_naming_its_key(data, message):
    assert refusal(data) == message


@pytest.mark.parametrize("data, message", [
    ({"service": {"prot": 1}}, "config: unknown key service.prot (did you mean service.port?)"),
    ({"servce": {"port": 1}}, "config: unknown key servce (did you mean service?)"),
    ({"pool": {"defualt_k": 5}}, "config: unknown key pool.defualt_k (did you mean pool.default_k?)"),
    ({"reader": {"max_modle_len": 2048}},
     "config: unknown key reader.max_modle_len (did you mean reader.max_model_len?)"),
    ({"readers": {"1.5B": {"cpu_nics": 5}}},
     "config: unknown key readers.1.5B.cpu_nics (did you mean readers.1.5B.cpu_nice?)"),
    ({"index": {"sources": {"SE": {"backend": "http", "optoins": {}}}}},
     "config: unknown key index.sources.SE.optoins (did you mean index.sources.SE.options?)"),
    ({"voter": {"weight": "equal"}}, "config: unknown key voter.weight (did you mean voter.weights?)"),
    ({"ask": {"zzz": 1}}, "config: unknown key ask.zzz; known: keep_warm_s"),
])
def test_a_misspelt_key_is_one_line_naming_it_and_the_nearest_known_key(data, message):
    assert refusal(data) == message


def test_eor_says_a_config_error_in_one_line_without_a_traceback(tmp_path, capsys):
    from serve.cli import run_reporting_errors

    path = tmp_path / "eor.yaml"
    path.write_text("service:\n  prot: 50051\n")
    assert run_reporting_errors(lambda: load_config(path) and 0) == 2
    err = capsys.readouterr().err
    assert err == "eor: error: config: unknown key service.prot (did you mean service.port?)\n"


def test_a_valid_config_round_trips_through_plain_data_unchanged():
    c = config_from_dict({
        "reader": {"model": "m", "cpu_nice": 2, "enforce_eager": True}, "readers": {"big": {"model": "b", "seed": 1}},
        "generator": {"model": ""}, "pool": {"specs": ["Wiki@10", "SE@1~big", "ReFree"], "default_k": 5},
        "index": {"name": "x", "sources": {"Wiki": "dense", "SE": {"backend": "http", "options": {"fetch_pages": True}}}},
        "cache": {"enabled": False}, "voter": {"weights": "equal", "metrics": ["em"]},
        "service": {"port": 0, "ask_deadline_s": 60, "retriever_actors": [["Wiki@10", "SE@1~big"]],
                    "placement": {"Reader_big": {"eor_big": 1}}, "min_confidence": 0.5},
        "ask": {"keep_warm_s": 0}})
    back = config_from_dict(c.to_dict())
    assert back == c and back.to_dict() == c.to_dict() and isinstance(back, EorConfig)
    assert c.service.retriever_actors == (("Wiki@10", "SE@1~big"),) and c.index.sources["SE"].options == {
        "fetch_pages": True}
    assert config_from_dict({}) == EorConfig()  # no file: the defaults, as constructed


def eor_configs() -> list[Path]:
    """The eor configs the repository ships: deploy/eor-*.yaml and bench/configs/*.yaml."""
    return sorted([*(ROOT / "deploy").glob("eor-*.yaml"), *(ROOT / "bench" / "configs").glob("*.yaml")])


@pytest.mark.parametrize("path", eor_configs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_config_loads_and_round_trips(path):
    c = load_config(path)
    assert config_from_dict(c.to_dict()) == c


def test_the_shipped_configs_are_found():
    names = {str(p.relative_to(ROOT)) for p in eor_configs()}
    assert {"deploy/eor-cluster.yaml", "bench/configs/cold.yaml"} <= names


def test_the_config_imports_nothing_of_the_service_app():
    """The dependency points from serve/app to the config, never back."""
    for name in ("config.py", "config_schema.py", "config_readers.py"):
        text = (ROOT / "serve" / name).read_text()
        assert not re.search(r"^\s*(from|import) serve\.app", text, re.M), name
