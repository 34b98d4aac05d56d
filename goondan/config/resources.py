"""The resource envelope and the schema of each of the 8 kinds.

Field names follow ``../shared/spec/resources.md`` plus goondan's additions (documented in
``docs/configuration.md``): Agent ``workdir`` and ``parallelToolCalls``, Tool and Model
``timeoutMs``, Package dependencies by local ``path``, Connection ``verify.webhook``.
"""

from __future__ import annotations

import re
from typing import Any

from goondan.config.a2a import A2A_SCHEMA
from goondan.config.envelope import Location, Resource, agent_prompt, deep_merge
from goondan.config.mcp import MCP_SCHEMA, exports_schema, tool_source_rule
from goondan.config.providers import PROVIDER_NAMES
from goondan.config.refs import KINDS, parse_ref, parse_ref_item
from goondan.config.schema import (
    AnyValue,
    Bool,
    Checker,
    Custom,
    Int,
    ListOf,
    MapOf,
    Num,
    Obj,
    Schema,
    Str,
)
from goondan.config.values import check_value_source
from goondan.config.yamlsource import FieldPath

__all__ = [
    "API_VERSION",
    "KINDS",
    "KIND_SCHEMAS",
    "PROVIDERS",
    "SUPPORTED_API_VERSIONS",
    "Location",
    "Resource",
    "agent_prompt",
    "deep_merge",
]

API_VERSION = "goondan.ai/v1"
SUPPORTED_API_VERSIONS = (API_VERSION,)
PROVIDERS = PROVIDER_NAMES  # the built-in names of the one table, goondan/config/providers.py
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
PACKAGE_NAME_PATTERN = re.compile(r"^(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*$")
EXPORT_NAME_PATTERN = re.compile(r"^[a-z0-9_-]+$")
SEMVER = re.compile(r"^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$")


# --- reusable pieces -----------------------------------------------------------------------

def _ref(*kinds: str, bare: str | None = None) -> Schema:
    return Custom(lambda v, p, ck: parse_ref(v, p, ck, kinds, bare_name_kind=bare) is not None)


def _ref_list(
    kind: str, *, allow_config: bool = False, bare: bool = False, min_items: int = 0
) -> Schema:
    item = Custom(lambda v, p, ck: parse_ref_item(
        v, p, ck, kind, allow_config=allow_config, bare_name=bare) is not None)
    return ListOf(item, min_items=min_items)


VALUE_SOURCE = Custom(check_value_source)
ENTRY = Str()
APPROVAL = Str(choices=("required", "never"))


def _export_name(value: Any, path: FieldPath, ck: Checker) -> bool:
    if not Str().check(value, path, ck):
        return False
    if "__" in value:
        ck.error(f"export name {value!r} must not contain '__'", path,
                 "'__' separates the Tool name from the export name; use '_' or '-'")
        return False
    if not EXPORT_NAME_PATTERN.match(value):
        ck.error(
            f"export name {value!r} may only use a-z, 0-9, '_' and '-'",
            path,
            f"rename it, e.g. {re.sub(r'[^a-z0-9_-]+', '-', value.lower()).strip('-') or 'run'!r}",
        )
        return False
    return True


def _json_schema_object(value: Any, path: FieldPath, ck: Checker) -> bool:
    if not isinstance(value, dict):
        ck.error(f"parameters must be a JSON Schema mapping, got {type(value).__name__}", path,
                 "write parameters: {type: object, properties: {...}}")
        return False
    if value.get("type", "object") != "object":
        ck.error("parameters must have type: object", (*path, "type"),
                 "tool arguments are always an object; put fields under 'properties'")
        return False
    for key in ("properties",):
        if key in value and not isinstance(value[key], dict):
            ck.error(f"parameters.{key} must be a mapping", (*path, key), "map names to schemas")
            return False
    if "required" in value and (
        not isinstance(value["required"], list)
        or not all(isinstance(r, str) for r in value["required"])
    ):
        ck.error("parameters.required must be a list of strings", (*path, "required"),
                 "write required: [name]")
        return False
    return True


def _unique(field_name: str, what: str) -> Any:
    def rule(value: dict[str, Any], path: FieldPath, ck: Checker) -> None:
        seen: set[str] = set()
        for i, item in enumerate(value.get(field_name) or []):
            name = item.get("name") if isinstance(item, dict) else None
            if isinstance(name, str):
                if name in seen:
                    ck.error(f"duplicate {what} name {name!r}", (*path, field_name, i, "name"),
                             f"{what} names must be unique; rename or remove one")
                seen.add(name)
    return rule


def _prompts_rule(value: dict[str, Any], path: FieldPath, ck: Checker) -> None:
    if "systemPrompt" not in value and "systemRef" not in value:
        ck.error("prompts needs systemPrompt or systemRef", path,
                 "add systemPrompt: \"You are ...\" or systemRef: ./prompts/system.md")


def _prompt_rule(value: dict[str, Any], path: FieldPath, ck: Checker) -> None:
    # The reference's newer block: `system` and `systemRef` are mutually exclusive (MUST).
    if "system" in value and "systemRef" in value:
        ck.error("prompt may set system or systemRef, not both", path,
                 "keep one of the two (or use prompts: {systemPrompt, systemRef} to combine them)")


def _agent_prompt_rule(value: dict[str, Any], path: FieldPath, ck: Checker) -> None:
    # `prompt` (reference, newer) and `prompts` (spec) are two spellings of one setting
    # (docs/compatibility.md): exactly one of them; none is only a warning, as in the reference.
    if "prompt" in value and "prompts" in value:
        ck.error("Agent sets both prompt and prompts; use exactly one", (*path, "prompt"),
                 "keep prompt: {system | systemRef} and remove prompts")
    elif "prompt" not in value and "prompts" not in value:
        ck.warning(
            "W_CONFIG_NO_PROMPT",
            "Agent has no system prompt",
            path,
            'add prompt: {system: "You are ..."} or prompt: {systemRef: ./prompts/system.md}',
        )


def _required_tools_rule(value: dict[str, Any], path: FieldPath, ck: Checker) -> None:
    seen: set[str] = set()
    for i, name in enumerate(value.get("requiredTools") or []):
        if name in seen:
            ck.error(f"duplicate requiredTools entry {name!r}", (*path, "requiredTools", i),
                     "list each tool once")
        seen.add(name)


def _route_rule(value: dict[str, Any], path: FieldPath, ck: Checker) -> None:
    if "instanceKey" in value and "instanceKeyProperty" in value:
        ck.error("route may set instanceKey or instanceKeyProperty, not both", path,
                 "keep one of the two")


def _dependency_rule(value: dict[str, Any], path: FieldPath, ck: Checker) -> None:
    if "version" not in value and "path" not in value:
        ck.error("a dependency needs 'version' (installed package) or 'path' (local directory)",
                 path, "add version: ^1.0.0 or path: ./packages/my-pkg")


def _semver(value: Any, path: FieldPath, ck: Checker) -> bool:
    if not Str().check(value, path, ck):
        return False
    if not SEMVER.match(value):
        ck.error(f"version {value!r} is not semantic versioning (MAJOR.MINOR.PATCH)", path,
                 'quote it and use three numbers: version: "0.1.0"')
        return False
    return True


_EVENT_PROPERTY = Obj({
    "type*": Str(choices=("string", "number", "boolean")),
    "optional": Bool(),
    "description": Str(non_empty=False),
})

# Limits that end a turn with E_BUDGET_EXCEEDED (docs/observability.md "Budgets").
_BUDGET = Obj({
    "maxTokensPerTurn": Int(),
    "maxCostPerTrace": Num(minimum=0),
    "maxAgentRequestsPerTrace": Int(),
})

KIND_SCHEMAS: dict[str, Obj] = {
    "Model": Obj({
        "provider*": Str(),
        "model*": Str(),
        "apiKey": VALUE_SOURCE,
        "endpoint": Str(),
        "options": AnyValue(mapping=True),
        "capabilities": MapOf(Bool()),
        "timeoutMs": Int(),
        # USD per million tokens (docs/observability.md "Token and cost ledger").
        "pricing": Obj({
            "inputPerMTok": Num(minimum=0),
            "outputPerMTok": Num(minimum=0),
            "cachedInputPerMTok": Num(minimum=0),
        }),
    }),
    "Tool": Obj({
        # Exactly one of entry (a Python module) and mcp (an MCP server, docs/mcp.md).
        "entry": ENTRY,
        "mcp": MCP_SCHEMA,
        "a2a": A2A_SCHEMA,  # or a remote A2A agent (docs/tools.md)
        "errorMessageLimit": Int(),
        "timeoutMs": Int(),
        "maxOutputBytes": Int(),
        "config": AnyValue(mapping=True),
        "exports": exports_schema(ListOf(Obj({
            "name*": Custom(_export_name),
            "description": Str(non_empty=False),
            "parameters": Custom(_json_schema_object),
            # Human approval before a call runs (docs/approvals.md); expiry = denial.
            "approval": APPROVAL,
            "approvalTimeoutMs": Int(),
            # Safe to run again after a crash with the same arguments (docs/tools.md "Idempotency").
            "idempotent": Bool(),
        }), min_items=1)),
    }, rules=(tool_source_rule, _unique("exports", "export"))),
    "Extension": Obj({
        "entry*": ENTRY,
        "config": AnyValue(mapping=True),
    }),
    "Agent": Obj({
        "modelConfig*": Obj({
            "modelRef*": _ref("Model"),
            "params": Obj({
                "temperature": Num(minimum=0, maximum=2),
                "maxTokens": Int(),
                "topP": Num(minimum=0, maximum=1),
            }, extra=AnyValue()),
        }),
        "prompt": Obj({
            "system": Str(non_empty=False),  # the reference accepts "" (no prompt)
            "systemRef": Str(),
        }, rules=(_prompt_rule,)),
        "prompts": Obj({
            "systemPrompt": Str(),
            "systemRef": Str(),
        }, rules=(_prompts_rule,)),
        "tools": _ref_list("Tool", allow_config=True),
        "extensions": _ref_list("Extension", allow_config=True),
        "requiredTools": ListOf(Str()),
        "workdir": Str(),
        "parallelToolCalls": Bool(),
        "requestTimeoutMs": Int(),
        "description": Str(),
        "maxToolOutputBytes": Int(),
        "spillToolOutput": Bool(),
        "budget": _BUDGET,
        # docs/configuration.md "Agent": input for a running turn waits (queue) or joins it (steer).
        "inputPolicy": Str(choices=("queue", "steer")),
    }, rules=(_required_tools_rule, _agent_prompt_rule), hints={
        # Forms found in some of the reference's tutorials (docs/compatibility.md).
        "system": 'the system prompt goes under prompt: write prompt: {system: "..."}',
        "model": 'write modelConfig: {modelRef: "Model/<name>"}',
    }),
    "Swarm": Obj({
        "entryAgent*": _ref("Agent", bare="Agent"),
        "agents*": _ref_list("Agent", bare=True, min_items=1),
        "instanceKey": Str(),
        "policy": Obj({
            "maxStepsPerTurn": Int(),
            "lifecycle": Obj({"ttlSeconds": Int(), "gcGraceSeconds": Int()}),
            "shutdown": Obj({"gracePeriodSeconds": Num(minimum=0, exclusive_min=True)}),
            "budget": _BUDGET,
            # docs/scaling.md: idle instances are released; Ray host actors of --engine ray.
            "idleTimeoutMs": Int(),
            "ray": Obj({"hosts": Int()}),
            # docs/scaling.md "Pooled hosts": one process per instance, or many per host process.
            "isolation": Str(choices=("process", "pooled")),
            "pool": Obj({"hosts": Int()}),
        }),
    }),
    "Connector": Obj({
        "entry*": ENTRY,
        "events*": ListOf(Obj({
            "name*": Str(),
            "description": Str(non_empty=False),
            "properties": MapOf(_EVENT_PROPERTY),
        }), min_items=1),
    }, rules=(_unique("events", "event"),)),
    "Connection": Obj({
        "connectorRef*": _ref("Connector"),
        "swarmRef": _ref("Swarm"),
        "config": MapOf(VALUE_SOURCE),
        "secrets": MapOf(VALUE_SOURCE),
        "verify": Obj({"webhook": Obj({"signingSecret": VALUE_SOURCE})}),
        "ingress": Obj({
            "rules": ListOf(Obj({
                "match": Obj({
                    "event": Str(),
                    "properties": MapOf(Custom(lambda v, p, ck: _scalar(v, p, ck))),
                }),
                "route*": Obj({
                    "agentRef": _ref("Agent"),
                    "instanceKey": Str(),
                    "instanceKeyProperty": Str(),
                    "instanceKeyPrefix": Str(non_empty=False),
                }, rules=(_route_rule,)),
            })),
        }),
    }),
    "Package": Obj({
        "version": Custom(_semver),
        "description": Str(non_empty=False),
        "access": Str(choices=("public", "restricted")),
        "dependencies": ListOf(Obj({
            "name*": Str(),
            "version": Str(),
            "path": Str(),
        }, rules=(_dependency_rule,))),
        "registry": Obj({"url": Str()}),
    }),
}


def _scalar(value: Any, path: FieldPath, ck: Checker) -> bool:
    if isinstance(value, str | int | float | bool):
        return True
    ck.error("match.properties values must be strings, numbers or booleans", path,
             "compare against a single value")
    return False


METADATA_SCHEMA = Obj({
    "name*": Str(non_empty=False),
    "labels": MapOf(Str(non_empty=False)),
    "annotations": MapOf(Str(non_empty=False)),
})

ENVELOPE_FIELDS = ("apiVersion", "kind", "metadata", "spec")
