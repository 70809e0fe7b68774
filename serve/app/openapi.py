"""The HTTP front's OpenAPI schema, made from protos/eor.proto's descriptors: the JSON bodies are
the proto messages in proto3's JSON mapping (serve/app/wire.py: json_request, reply_json), so the
schema is derived, never a second list of fields to keep in step."""
from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor

F = FieldDescriptor
_SCALARS = {F.CPPTYPE_STRING: {"type": "string"}, F.CPPTYPE_BOOL: {"type": "boolean"},
            F.CPPTYPE_DOUBLE: {"type": "number", "format": "double"}, F.CPPTYPE_FLOAT: {"type": "number", "format": "float"},
            F.CPPTYPE_INT32: {"type": "integer", "format": "int32"}, F.CPPTYPE_UINT32: {"type": "integer", "format": "uint32"},
            # proto3 JSON: 64-bit integers are read as numbers or strings; the replies send numbers
            F.CPPTYPE_INT64: {"type": "integer", "format": "int64"}, F.CPPTYPE_UINT64: {"type": "integer", "format": "uint64"}}

ERROR = {"type": "object", "required": ["error", "status"], "additionalProperties": False,
         "properties": {"error": {"type": "string", "description": "what went wrong, one line"},
                        "status": {"type": "string", "description": "the gRPC status name (INVALID_ARGUMENT, ...)"}}}


def ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def message_schemas(*messages: Descriptor) -> dict[str, dict]:
    """JSON Schemas of `messages` and every message they hold, by message name."""
    out: dict[str, dict] = {}

    def add(desc: Descriptor) -> None:
        if desc.name in out:
            return
        props: dict[str, Any] = {}
        out[desc.name] = {"type": "object", "properties": props, "additionalProperties": False}
        for f in desc.fields:
            if f.cpp_type == F.CPPTYPE_MESSAGE:
                add(f.message_type)
                one: dict = ref(f.message_type.name)
            elif f.cpp_type == F.CPPTYPE_ENUM:
                one = {"type": "string", "enum": [v.name for v in f.enum_type.values]}
            else:
                one = dict(_SCALARS.get(f.cpp_type, {}))
            props[f.name] = {"type": "array", "items": one} if f.is_repeated else one
    for m in messages:
        add(m)
    return out


def json_body(name: str) -> dict:
    return {"content": {"application/json": {"schema": ref(name)}}}


def error_responses(*statuses: int) -> dict:
    return {str(s): {"description": "one line: what went wrong", **json_body("Error")} for s in statuses}


def route_doc(request: str | None, reply: str | None, stream: bool = False, errors: tuple[int, ...] = ()) -> dict:
    """The `openapi_extra` of one route: its request body, reply and error replies."""
    doc: dict[str, Any] = {"responses": error_responses(*errors)}
    if request:
        doc["requestBody"] = {"required": True, **json_body(request)}
    if stream:
        doc["responses"]["200"] = {"description": f"server-sent events: `preview` (stage 0), `round` (a provisional "
                                                  f"{reply} after a round that left the question open), `final` (the "
                                                  "last reply), or `error` ({\"error\", \"status\"}) that ends the stream",
                                   "content": {"text/event-stream": {"schema": {"type": "string"}}}}
    elif reply:
        doc["responses"]["200"] = {"description": reply, **json_body(reply)}
    return doc


def components(*messages: Descriptor) -> dict:
    return {"schemas": {**message_schemas(*messages), "Error": ERROR}}
