"""The config's schema check: a YAML's sections read into their frozen dataclasses (serve/config.py)
by pydantic, so a value of the wrong type, one outside the bounds its field declares
(`Annotated[int, Field(ge=1)]`) or a key no section has is refused before anything starts, in one
line naming the key's full path, and for a misspelt key the nearest known one:

    config: unknown key service.prot (did you mean service.port?)
    config: service.port: should be less than or equal to 65535, got 70000

The sections' own checks (`__post_init__`) run as before and their messages pass through as they
are. The data is checked as the JSON it is (YAML's values are JSON's) in pydantic's strict mode:
a string is never read as a number nor a number as a string, while a list still reads as a tuple.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import typing
from typing import Any

from pydantic import ConfigDict, TypeAdapter, ValidationError

# keys that were renamed: the old name is an error that says the new one
RENAMED = {"service.retriever_timeout_s": ("service.ask_deadline_s", "it is the whole Ask's default deadline")}
UNKNOWN = ("unexpected_keyword_argument", "extra_forbidden")  # pydantic's types for a key no field has


def validate(cls: type, data: dict[str, Any], where: str = "") -> Any:
    """`data` read into the dataclass `cls` (the sections under it too), or ValueError in one line
    naming the key under `where` (the path of `data` in the file: "" its top, "readers.1.5B")."""
    plain = json.loads(json.dumps(data, default=str))  # what the error paths walk: keys as pydantic saw them
    try:
        return _adapter(cls).validate_json(json.dumps({"value": plain}), strict=True).value
    except ValidationError as exc:
        raise ValueError(one_line(cls, plain, exc.errors(), where)) from None


@functools.cache
def _adapter(cls: type) -> TypeAdapter:
    """A holder with `cls` its one field: its pydantic config (no unknown keys) reaches every section."""
    holder = dataclasses.make_dataclass(f"{cls.__name__}Input", [("value", cls)], frozen=True,
                                        namespace={"__pydantic_config__": ConfigDict(extra="forbid")})
    return TypeAdapter(holder)


def one_line(cls: type, data: Any, errors: list[dict], where: str = "") -> str:
    """The first of pydantic's `errors` as one line (the others at its key, a union's members, join it)."""
    first = errors[0]
    keys = key_path(data, first["loc"][1:], keep_last=first["type"] == "missing")
    path = ".".join(([where] if where else []) + keys)
    if first["type"] in UNKNOWN:
        return unknown_key(path, known_keys(cls, keys[:-1]))
    if first["type"] == "value_error" and "error" in first.get("ctx", {}):  # a section's own check, as it says it
        return f"{where}: {first['ctx']['error']}" if where else str(first["ctx"]["error"])
    same = [_said(e["msg"]) for e in errors if key_path(data, e["loc"][1:], e["type"] == "missing") == keys]
    got = "" if first["type"] == "missing" else f", got {_short(first['input'])}"
    said = " or ".join(dict.fromkeys(same)).replace(" or should be ", " or ")
    return f"config: {path or 'the file'}: {said}{got}"


def unknown_key(path: str, known: list[str]) -> str:
    """The error for a key no section has: the new name of a renamed one, else the nearest known."""
    if path in RENAMED:
        new, why = RENAMED[path]
        return f"config key {path} is now {new} ({why}); rename it"
    parent, _, key = path.rpartition(".")
    near = difflib.get_close_matches(key, known, n=1)
    if near:
        return f"config: unknown key {path} (did you mean {parent + '.' if parent else ''}{near[0]}?)"
    return f"config: unknown key {path}; known: {', '.join(known)}"


def key_path(data: Any, loc: tuple, keep_last: bool = False) -> list[str]:
    """The keys of an error's location that are keys of `data` (the rest name a union's members)."""
    keys, node = [], data
    for i, part in enumerate(loc):
        if isinstance(node, dict) and part in node:
            keys.append(str(part))
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            keys[-1:] = [f"{keys[-1]}[{part}]"] if keys else [f"[{part}]"]
            node = node[part]
        elif keep_last and i == len(loc) - 1:
            keys.append(str(part))
    return keys


def known_keys(cls: type, keys: list[str]) -> list[str]:
    """The field names of the section at `keys` under the dataclass `cls`."""
    section = cls
    for key in keys:
        section = _dataclass(typing.get_type_hints(section, include_extras=True).get(key.split("[")[0]))
        if section is None:
            return []
    return [f.name for f in dataclasses.fields(section)]


def _dataclass(tp: Any) -> type | None:
    """The dataclass a field's type names (through Annotated and `X | None`), if any."""
    if dataclasses.is_dataclass(tp):
        return tp
    for arg in typing.get_args(tp):
        found = _dataclass(arg)
        if found is not None:
            return found
    return None


def _said(msg: str) -> str:
    """pydantic's message after the key: "should be a valid integer", "field required"."""
    return "should be " + msg.removeprefix("Input should be ") if msg.startswith("Input should be ") \
        else msg[:1].lower() + msg[1:]


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
