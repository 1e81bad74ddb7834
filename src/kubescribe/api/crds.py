"""CustomResourceDefinitions generated from the API models, as Kubernetes structural schemas."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from kubescribe.api.models import GROUP, VERSION
from kubescribe.api.objects import KINDS, ApiObject

Schema = dict[str, Any]

# JSON schema keywords a structural schema may carry; anything else pydantic emits is an error.
_ALLOWED = frozenset(
    {
        "type",
        "description",
        "properties",
        "required",
        "items",
        "additionalProperties",
        "enum",
        "default",
        "format",
        "pattern",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "x-kubernetes-validations",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
    }
)
_VALIDATIONS = "x-kubernetes-validations"


def crd_manifests() -> list[dict[str, Any]]:
    """One CustomResourceDefinition per kind, in a fixed order."""
    return [_crd(kind) for kind in KINDS]


def render_crds() -> str:
    """All CRDs as one multi-document YAML stream (deterministic bytes)."""
    return yaml.dump_all(
        crd_manifests(),
        Dumper=yaml.SafeDumper,
        explicit_start=True,
        sort_keys=False,
        allow_unicode=True,
        width=1 << 20,
    )


def _crd(kind: type[ApiObject]) -> dict[str, Any]:
    name = kind.__name__
    raw = kind.model_json_schema(by_alias=True)
    defs: dict[str, Schema] = raw.get("$defs", {})
    fields = raw["properties"]
    schema = {
        "type": "object",
        "description": raw["description"],
        "properties": {
            "apiVersion": {"type": "string", "description": fields["apiVersion"]["description"]},
            "kind": {"type": "string", "description": fields["kind"]["description"]},
            "metadata": {"type": "object"},
            "spec": structural(fields["spec"], defs),
            "status": structural(fields["status"], defs),
        },
        "required": ["spec"],
    }
    columns = [
        {"name": c.name, "type": c.type, "jsonPath": c.json_path}
        | ({"priority": c.priority} if c.priority else {})
        for c in kind.columns
    ]
    columns.append({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"})
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{kind.plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": name,
                "listKind": f"{name}List",
                "plural": kind.plural,
                "singular": name.lower(),
                "shortNames": [kind.short_name],
                "categories": ["kubescribe"],
            },
            "scope": "Namespaced" if kind.namespaced else "Cluster",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def structural(node: Schema, defs: dict[str, Schema]) -> Schema:
    """Turn a pydantic JSON schema node into a Kubernetes structural schema.

    `$ref`s are inlined, `anyOf [X, null]` becomes X (optional = not required), `title` and
    `default: null` are dropped. Raises `ValueError` on keywords Kubernetes does not accept.
    """
    node = _resolve(copy.deepcopy(node), defs)
    out: Schema = {}
    for key, value in node.items():
        if key == "title" or (key == "default" and value is None):
            continue
        if key not in _ALLOWED:
            raise ValueError(f"unsupported JSON schema keyword {key!r} in {node}")
        if key == "properties":
            out[key] = {name: structural(sub, defs) for name, sub in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = structural(value, defs)
        else:
            out[key] = value
    if "type" not in out:
        raise ValueError(f"schema node without type: {node}")
    return {
        "type": out.pop("type"),
        **({"description": out.pop("description")} if "description" in out else {}),
        **out,
    }


def _resolve(node: Schema, defs: dict[str, Schema]) -> Schema:
    """Replace a `$ref` / single `allOf` / nullable `anyOf` node by its target, keeping siblings."""
    while True:
        if "$ref" in node:
            target = defs[node.pop("$ref").removeprefix("#/$defs/")]
        elif "allOf" in node and len(node["allOf"]) == 1:
            target = node.pop("allOf")[0]
        elif "anyOf" in node:
            options = [o for o in node.pop("anyOf") if o != {"type": "null"}]
            if len(options) != 1:
                raise ValueError(f"only `X | None` unions are supported, got {options}")
            target = options[0]
        else:
            return node
        node = _merge(target, node)


def _merge(base: Schema, override: Schema) -> Schema:
    """`override` wins, except that CEL rules of both are kept (base first)."""
    merged = {**copy.deepcopy(base), **override}
    rules = base.get(_VALIDATIONS, []) + override.get(_VALIDATIONS, [])
    if rules:
        merged[_VALIDATIONS] = copy.deepcopy(rules)
    return merged
