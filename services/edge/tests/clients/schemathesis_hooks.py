"""Schemathesis hooks for services/edge/tests/clients/schemathesis.sh (SCHEMATHESIS_HOOKS).

The edge's OpenAPI names a path parameter after the proto field it fills, as the
google.api.http rule does: `PATCH /api/context/roles/{role.id}`. That is valid OpenAPI (a
parameter name is any string), but schemathesis 4.32 substitutes path templates with Python's
str.format, which reads `{role.id}` as attribute `id` of a field `role` and fails with
KeyError: 'role', a runtime error for that operation and, through the coverage phase's
unexpected-method probe that looks at sibling paths, for GET/DELETE /api/context/roles/{role_id}
too. This hook renames such parameters before the schema is loaded (`role.id` -> `role__id`),
in the path template and in the parameter list alike: the requests sent are byte for byte the
same, since only the placeholder's name changes, never where its value goes.
"""

from __future__ import annotations

import re
from typing import Any

import schemathesis

_PLACEHOLDER = re.compile(r"\{([^{}]+)\}")
_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def _safe(name: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]", "__", name)


def _rename_parameters(parameters: Any, renamed: dict[str, str]) -> None:
    for parameter in parameters or ():
        if isinstance(parameter, dict) and parameter.get("in") == "path" and parameter.get("name") in renamed:
            parameter["name"] = renamed[parameter["name"]]


@schemathesis.hook
def before_load_schema(context: Any, raw_schema: dict[str, Any]) -> None:
    paths = raw_schema.get("paths")
    if not isinstance(paths, dict):
        return
    rewritten: dict[str, Any] = {}
    for path, item in paths.items():
        renamed = {name: _safe(name) for name in _PLACEHOLDER.findall(path) if _safe(name) != name}
        if renamed and isinstance(item, dict):
            path = _PLACEHOLDER.sub(lambda m: "{" + renamed.get(m.group(1), m.group(1)) + "}", path)
            _rename_parameters(item.get("parameters"), renamed)
            for method in _METHODS:
                operation = item.get(method)
                if isinstance(operation, dict):
                    _rename_parameters(operation.get("parameters"), renamed)
        rewritten[path] = item
    paths.clear()
    paths.update(rewritten)
