"""Cross-resource validation and the public entry points ``validate_bundle`` / ``load_bundle``.

Everything is collected in one pass: the loader's file and schema diagnostics, then duplicate
names, references, selectors, entry modules, prompt files, capabilities, connections and
environment values. Warnings never make a bundle invalid unless ``strict`` is set.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from goondan.config.bundle import Bundle
from goondan.config.entries import module_symbols, resolve_inside
from goondan.config.loader import LoadResult, load_resources
from goondan.config.packages import BUILTIN_ROOT
from goondan.config.providers import PROVIDERS, installed_providers, known_params
from goondan.config.refs import RefItem, parse_ref, parse_ref_item
from goondan.config.resolve import Index
from goondan.config.resources import KIND_SCHEMAS, Resource, agent_prompt
from goondan.config.schema import Checker, did_you_mean
from goondan.config.values import env_names
from goondan.config.yamlsource import FieldPath
from goondan.errors import BundleError, ConfigError, Diagnostic
from goondan.secrets import register_secret
from goondan.tools.naming import sanitize_export_name

__all__ = [
    "ValidationReport",
    "bundle_or_raise",
    "load_bundle",
    "validate_bundle",
    "validate_loaded",
]

_ENTRY_SYMBOL = {"Tool": "handlers", "Extension": "register", "Connector": "run"}


@dataclass
class ValidationReport:
    """Result of :func:`validate_bundle`: ``valid`` plus every error and warning."""

    valid: bool
    errors: list[Diagnostic] = field(default_factory=list)
    warnings: list[Diagnostic] = field(default_factory=list)
    bundle: Bundle | None = None
    unreadable: bool = False  # the bundle could not be read at all (CLI exit 3)
    root: Path | None = None
    files: list[Path] = field(default_factory=list)
    resource_count: int = 0

    def to_dict(self) -> dict[str, Any]:
        """``{"valid", "errors", "warnings"}`` as printed by ``goondan validate --format json``."""
        return {
            "valid": self.valid,
            "errors": [d.to_dict() for d in self.errors],
            "warnings": [d.to_dict() for d in self.warnings],
        }


class _Validator:
    def __init__(self, loaded: LoadResult, env: Mapping[str, str]) -> None:
        self.loaded = loaded
        self.env = env
        self.diagnostics = loaded.diagnostics
        package = loaded.package.name if loaded.package else None
        self.index = Index(loaded.resources, package)

    def ck(self, res: Resource) -> Checker:
        return Checker(res.source, res.id, self.diagnostics)

    def run(self) -> None:
        self._duplicates()
        resources = self.loaded.resources
        if not any(r.package is None and r.kind != "Package" for r in resources):
            self.diagnostics.append(
                Diagnostic(
                    "E_CONFIG_NO_RESOURCES",
                    "the bundle defines no resources",
                    file=next((r.location.display for r in resources), None),
                    suggestion="add a Model, an Agent and a Swarm "
                    "('goondan init' writes a starter bundle)",
                )
            )
        elif not any(r.kind == "Swarm" for r in resources):
            self.diagnostics.append(
                Diagnostic(
                    "W_CONFIG_NO_SWARM",
                    "the bundle defines no Swarm, so nothing can run",
                    severity="warning",
                    file=resources[-1].location.display,
                    suggestion="add 'kind: Swarm' with entryAgent and agents",
                )
            )
        for res in resources:
            check = getattr(self, f"_check_{res.kind.lower()}", None)
            if check is not None:
                check(res, self.ck(res))

    # --- generic helpers -------------------------------------------------------------------

    def _duplicates(self) -> None:
        seen: dict[tuple[str | None, str, str], Resource] = {}
        for res in self.loaded.resources:
            key = (res.package, res.kind, res.name)
            first = seen.get(key)
            if first is None:
                seen[key] = res
                continue
            self.ck(res).error(
                f"{res.id} is already defined at {first.location}",
                ("metadata", "name"),
                "rename one of them; kind + name must be unique",
                code="E_CONFIG_DUPLICATE_NAME",
            )

    def _ref(self, res: Resource, ck: Checker, value: Any, path: FieldPath, kind: str,
             *, bare: bool = False) -> Resource | None:
        ref = parse_ref(
            value, path, Checker(None, None), (kind,), bare_name_kind=kind if bare else None
        )
        if ref is None:
            return None  # the schema pass already reported it
        found = self.index.resolve(ref, res)
        if found.resource is None and found.code:
            ck.error(
                found.message or "reference not found", path, found.suggestion, code=found.code
            )
        return found.resource

    def _items(self, res: Resource, ck: Checker, items: Any, path: FieldPath, kind: str,
               *, bare: bool = False) -> list[tuple[Resource, RefItem]]:
        out: list[tuple[Resource, RefItem]] = []
        if not isinstance(items, list):
            return out
        for i, raw in enumerate(items):
            item = parse_ref_item(raw, (*path, i), Checker(None, None), kind,
                                  allow_config=kind == "Extension", bare_name=bare)
            if item is None:
                continue
            if item.selector is not None:
                selected = self.index.select(item.selector, res)
                if not selected:
                    ck.warning(
                        "W_CONFIG_SELECTOR_NO_MATCH",
                        f"selector matches no {item.selector.kind} resource",
                        (*path, i, "selector"),
                        "check matchLabels against the resources' metadata.labels",
                    )
                for sel in selected:
                    self._check_override(res, ck, sel, item, kind)
                    out.append((sel, item))
            elif item.ref is not None:
                if isinstance(raw, dict) and "ref" in raw:
                    value, ref_path = raw["ref"], (*path, i, "ref")
                else:
                    value, ref_path = raw, (*path, i)
                found = self._ref(res, ck, value, ref_path, kind, bare=bare)
                if found is not None:
                    out.append((found, item))
        return out

    def _check_override(self, res: Resource, ck: Checker, selected: Resource, item: RefItem,
                        kind: str) -> None:
        if item.selector is None or not item.selector.overrides.get("spec"):
            return
        probe = Checker(None, None)
        KIND_SCHEMAS[kind].check(selected.spec, ("spec",), probe)
        for diag in probe.diagnostics:
            ck.error(
                f"overrides make {selected.id} invalid: {diag.message}",
                (*item.path, "overrides"),
                diag.suggestion,
                code=diag.code,
            )

    def _file(
        self, res: Resource, ck: Checker, rel: Any, path: FieldPath, *, entry: bool
    ) -> Path | None:
        if not isinstance(rel, str) or not rel.strip():
            return None
        target, reason = resolve_inside(res.root, rel)
        if target is None:
            ck.error(f"{reason}", path, "use a path relative to the bundle root, inside it",
                     code="E_CONFIG_PATH_ESCAPE")
            return None
        what = "entry module" if entry else "prompt file"
        try:
            exists = target.exists()
        except OSError as exc:  # ENAMETOOLONG, EACCES on a parent …: a diagnostic, not a crash
            ck.error(f"{what} {rel[:80]!r} cannot be checked: {exc.strerror or exc}", path,
                     "use a shorter path to a readable file inside the bundle",
                     code="E_CONFIG_ENTRY_NOT_FOUND" if entry else "E_CONFIG_PROMPT_NOT_FOUND")
            return None
        if not exists:
            code = "E_CONFIG_ENTRY_NOT_FOUND" if entry else "E_CONFIG_PROMPT_NOT_FOUND"
            base = Path(rel).name
            try:
                candidates = (
                    [p.name for p in target.parent.iterdir()] if target.parent.is_dir() else []
                )
            except OSError:
                candidates = []
            guess = did_you_mean(base, candidates)
            ck.error(
                f"{what} {rel!r} not found",
                path,
                f"did you mean {guess!r}?" if guess else f"create {rel} (relative to {res.root})",
                code=code,
            )
            return None
        if not entry and not target.is_file():
            ck.error(f"prompt file {rel!r} is not a regular file", path,
                     "point systemRef at a text file", code="E_CONFIG_PROMPT_NOT_FOUND")
            return None
        return target

    def _entry(self, res: Resource, ck: Checker) -> None:
        target = self._file(res, ck, res.spec.get("entry"), ("spec", "entry"), entry=True)
        if target is None:
            return
        symbol = _ENTRY_SYMBOL[res.kind]
        if target.is_dir():
            if not (target / "__init__.py").is_file():
                ck.error(
                    f"entry {res.spec['entry']!r} is a directory without __init__.py",
                    ("spec", "entry"),
                    "point entry at a .py file or a Python package",
                    code="E_CONFIG_ENTRY_INVALID",
                )
                return
        elif target.suffix != ".py":
            hint = "goondan runs Python entry modules; write the module in Python"
            # a bundle written for the reference
            if target.suffix in (".ts", ".mts", ".js", ".mjs"):
                hint = ("this is a TypeScript/JavaScript module for the reference implementation; "
                        "port it to a Python module (docs/compatibility.md)")
            ck.error(f"entry {res.spec['entry']!r} is not a Python file (.py)", ("spec", "entry"),
                     hint, code="E_CONFIG_ENTRY_INVALID")
            return
        symbols = module_symbols(target)
        if symbols.error:
            ck.error(f"entry module cannot be parsed: {symbols.error}", ("spec", "entry"),
                     "fix the Python syntax error", code="E_CONFIG_ENTRY_INVALID")
            return
        if not symbols.defines(symbol):
            shape = {
                "handlers": "handlers = {'export-name': fn, ...}",
                "register": "def register(api): ...",
                "run": "async def run(ctx): ... (or a sync def run(ctx))",
            }[symbol]
            ck.error(f"entry module does not define '{symbol}'", ("spec", "entry"),
                     f"a {res.kind} module needs: {shape}", code="E_CONFIG_ENTRY_INVALID")
            return
        if res.kind == "Tool" and symbols.handler_keys is not None:
            exports = res.spec.get("exports")
            for i, export in enumerate(exports if isinstance(exports, list) else []):
                name = export.get("name") if isinstance(export, dict) else None
                if isinstance(name, str) and name not in symbols.handler_keys:
                    ck.error(
                        f"entry module's handlers has no key {name!r}",
                        ("spec", "exports", i, "name"),
                        f"add '{name}': <function> to handlers in {res.spec['entry']}",
                        code="E_CONFIG_ENTRY_INVALID",
                    )

    def _env(self, res: Resource, ck: Checker, value: Any, path: FieldPath, *, secret: bool,
             field_name: str) -> None:
        if not isinstance(value, dict):
            return
        if "value" in value and secret:
            if isinstance(value["value"], str):
                register_secret(value["value"])  # every report and excerpt masks it
            ck.warning("W_CONFIG_INLINE_SECRET", f"{path[-1]} holds a literal secret in YAML", path,
                       "use valueFrom: {env: VAR} so the secret stays out of version control")
            return
        names = env_names(value, field=field_name)
        if names and not any((self.env.get(n) or "").strip() for n in names):
            ck.warning("W_CONFIG_ENV_UNSET", f"environment variable {names[0]} is not set", path,
                       f"export {names[0]}=... (or put it in .env) before running")

    # --- per kind ------------------------------------------------------------------------

    def _check_model(self, res: Resource, ck: Checker) -> None:
        spec = res.spec
        provider = spec.get("provider")
        # Built-in names first; another name must be an installed distribution's provider
        # (entry point group goondan.providers, read from metadata without running its code).
        if isinstance(provider, str) and provider.strip() and provider not in PROVIDERS:
            installed = installed_providers()
            if provider not in installed:
                names = [*PROVIDERS, *sorted(installed)]
                guess = did_you_mean(provider, names)
                ck.error(f"unknown provider {provider!r}", ("spec", "provider"),
                         f"did you mean {guess!r}?" if guess else f"providers: {', '.join(names)}",
                         code="E_CONFIG_UNKNOWN_PROVIDER")
        endpoint = spec.get("endpoint")
        if isinstance(endpoint, str) and not re.match(r"^https?://[^\s/]+", endpoint):
            ck.error(f"endpoint {endpoint!r} is not an http(s) URL", ("spec", "endpoint"),
                     "write e.g. https://api.example.com/v1")
        row = PROVIDERS.get(provider) if isinstance(provider, str) else None
        if row is not None and row.endpoint_required and "endpoint" not in spec:
            ck.error(f"provider {provider} needs an endpoint", ("spec",),
                     "add endpoint: https://your-server/v1")
        self._env(res, ck, spec.get("apiKey"), ("spec", "apiKey"), secret=True, field_name="apiKey")
        options = spec.get("options")
        if (
            provider == "scripted"
            and isinstance(options, dict)
            and isinstance(options.get("scriptFile"), str)
        ):
            # Confined like an entry module (docs/testing-models.md).
            script, reason = resolve_inside(res.root, options["scriptFile"])
            if script is None:
                ck.error(
                    f"scriptFile: {reason}",
                    ("spec", "options", "scriptFile"),
                    "use a path relative to the bundle root, inside it",
                    code="E_CONFIG_PATH_ESCAPE",
                )

    def _check_tool(self, res: Resource, ck: Checker) -> None:
        if isinstance(res.spec.get("a2a"), dict):  # a remote A2A agent: its headers must resolve
            headers = res.spec["a2a"].get("headers")
            for key, value in (headers.items() if isinstance(headers, dict) else ()):
                self._env(res, ck, value, ("spec", "a2a", "headers", key), secret=True,
                          field_name=f"headers.{key}")
            return
        block = res.spec.get("mcp")
        if not isinstance(block, dict):
            self._entry(res, ck)
            return
        # An MCP server (docs/mcp.md): values must resolve; servers start only with --check-mcp.
        for section, secret in (("env", False), ("headers", True)):
            values = block.get(section)
            for key, value in (values.items() if isinstance(values, dict) else ()):
                self._env(res, ck, value, ("spec", "mcp", section, key), secret=secret,
                          field_name=f"{section}.{key}")

    def _check_extension(self, res: Resource, ck: Checker) -> None:
        self._entry(res, ck)

    def _check_connector(self, res: Resource, ck: Checker) -> None:
        self._entry(res, ck)

    def _check_params(self, ck: Checker, model: Resource, params: Any) -> None:
        """A ``modelConfig.params`` key close to, but not, one the Model's provider takes is
        probably a typo (``temprature``): ``W_CONFIG_UNKNOWN_PARAM`` with a did-you-mean. Other
        unknown keys pass through on purpose (docs/models.md)."""
        provider = model.spec.get("provider") if isinstance(model.spec, dict) else None
        known = known_params(provider if isinstance(provider, str) else None)
        if known is None or not isinstance(params, dict):
            return
        for key in params:
            if not isinstance(key, str) or key in known:
                continue
            guess = did_you_mean(key, known)
            if guess is not None:
                ck.report(
                    "W_CONFIG_UNKNOWN_PARAM",
                    f"{key!r} is not a parameter {provider} is known to take (Model/{model.name})",
                    ("spec", "modelConfig", "params", key),
                    key=True,
                    severity="warning",
                    suggestion=f"did you mean {guess!r}? (an unknown key is sent as written; "
                    "validate --strict makes this an error)",
                )

    def _check_agent(self, res: Resource, ck: Checker) -> None:
        spec = res.spec
        model_config = spec.get("modelConfig")
        model = None
        if isinstance(model_config, dict) and "modelRef" in model_config:
            model = self._ref(
                res, ck, model_config["modelRef"], ("spec", "modelConfig", "modelRef"), "Model"
            )
        if model is not None and isinstance(model_config, dict):
            self._check_params(ck, model, model_config.get("params"))
        tools = self._items(res, ck, spec.get("tools"), ("spec", "tools"), "Tool")
        extensions = self._items(
            res, ck, spec.get("extensions"), ("spec", "extensions"), "Extension"
        )
        block, _, system_ref = agent_prompt(spec)
        self._file(res, ck, system_ref, ("spec", block, "systemRef"), entry=False)
        names: set[str] = set()
        open_prefixes: set[str] = set()
        for tool, _ in tools:
            exports = tool.spec.get("exports")
            if "mcp" in tool.spec or "a2a" in tool.spec:
                # Server tools (card skills) are known only at run time; an allow-list names them.
                if isinstance(exports, list):
                    names.update(f"{tool.name}__{sanitize_export_name(e)}"
                                 for e in exports if isinstance(e, str))
                else:
                    open_prefixes.add(f"{tool.name}__")
                continue
            for export in exports if isinstance(exports, list) else []:  # a schema error already
                if isinstance(export, dict) and isinstance(export.get("name"), str):
                    names.add(f"{tool.name}__{export['name']}")
        required = spec.get("requiredTools")
        for i, name in enumerate(required if isinstance(required, list) else []):
            if not isinstance(name, str) or not name:
                continue
            if "__" not in name:
                ck.error(
                    f"requiredTools entry {name!r} is not a full tool name",
                    ("spec", "requiredTools", i),
                    "write '<tool>__<export>', e.g. 'bash__exec'",
                )
            elif name not in names and not name.startswith(tuple(open_prefixes)):
                message = f"required tool {name!r} is not offered by this Agent's tools"
                guess = did_you_mean(name, sorted(names))
                hint = f"did you mean {guess!r}?" if guess else "add the Tool to spec.tools"
                if extensions:  # an extension may register it at run time
                    ck.warning(
                        "W_CONFIG_REQUIRED_TOOL_UNKNOWN",
                        message,
                        ("spec", "requiredTools", i),
                        hint,
                    )
                else:
                    ck.error(
                        message,
                        ("spec", "requiredTools", i),
                        hint,
                        code="E_CONFIG_REQUIRED_TOOL_UNKNOWN",
                    )
        if model is not None:
            caps = model.spec.get("capabilities")
            caps = caps if isinstance(caps, dict) else {}
            if caps.get("toolCalling") is False and (tools or spec.get("tools")):
                ck.error(
                    f"Model {model.name!r} declares toolCalling: false but this Agent has tools",
                    ("spec", "tools"),
                    "remove the tools or use a model with tool calling",
                    code="E_CONFIG_CAPABILITY",
                )
            if spec.get("parallelToolCalls") is True and caps.get("parallelToolCalls") is False:
                ck.warning(
                    "W_CONFIG_CAPABILITY",
                    f"Model {model.name!r} declares parallelToolCalls: false",
                    ("spec", "parallelToolCalls"),
                    "set parallelToolCalls: false on the Agent",
                )
            if caps.get("streaming") is False and isinstance(model.spec.get("options"), dict) \
                    and model.spec["options"].get("stream") is True:
                ck.warning("W_CONFIG_CAPABILITY", f"Model {model.name!r} declares streaming: false",
                           ("spec", "modelConfig"), "do not request streaming from this model")

    def _check_swarm(self, res: Resource, ck: Checker) -> None:
        spec = res.spec
        agents = self._items(res, ck, spec.get("agents"), ("spec", "agents"), "Agent", bare=True)
        seen: set[int] = set()
        for agent, item in agents:
            if id(agent) in seen:
                ck.error(f"Agent {agent.name!r} is listed twice", item.path, "list each agent once")
            seen.add(id(agent))
        if "entryAgent" in spec:
            entry = self._ref(
                res, ck, spec["entryAgent"], ("spec", "entryAgent"), "Agent", bare=True
            )
            if entry is not None and agents and all(a is not entry for a, _ in agents):
                ck.error(
                    f"entryAgent {entry.name!r} is not in agents",
                    ("spec", "entryAgent"),
                    f"add {entry.name} to spec.agents or pick one "
                    f"of: {', '.join(a.name for a, _ in agents)}",
                )

    def _check_connection(self, res: Resource, ck: Checker) -> None:
        spec = res.spec
        connector = None
        if "connectorRef" in spec:
            connector = self._ref(
                res, ck, spec["connectorRef"], ("spec", "connectorRef"), "Connector"
            )
        if "swarmRef" in spec:
            swarm = self._ref(res, ck, spec["swarmRef"], ("spec", "swarmRef"), "Swarm")
        else:
            swarms = [s for s in self.index.of_kind("Swarm") if s.package == res.package]
            swarm = swarms[0] if swarms else None
            if swarm is None:
                ck.error("Connection has no swarmRef and the bundle has no Swarm", ("spec",),
                         "add a Swarm or set swarmRef", code="E_CONFIG_REF_NOT_FOUND")
        for section, secret in (("config", False), ("secrets", True)):
            values = spec.get(section)
            if isinstance(values, dict):
                for key, value in values.items():
                    self._env(res, ck, value, ("spec", section, key), secret=secret, field_name=key)
        verify = spec.get("verify")
        webhook = verify.get("webhook") if isinstance(verify, dict) else None
        if isinstance(webhook, dict):
            self._env(
                res,
                ck,
                webhook.get("signingSecret"),
                ("spec", "verify", "webhook", "signingSecret"),
                secret=True,
                field_name="signingSecret",
            )
        events: set[str] = set()
        declared = connector.spec.get("events") if connector is not None else None
        if isinstance(declared, list):  # anything else is already a schema error of the Connector
            for event in declared:
                if isinstance(event, dict) and isinstance(event.get("name"), str):
                    events.add(event["name"])
        swarm_agents: list[Resource] | None = None
        if swarm is not None:
            swarm_agents = [
                a
                for a, _ in self._items(
                    swarm, Checker(None, None), swarm.spec.get("agents"), (), "Agent", bare=True
                )
            ]
        ingress = spec.get("ingress")
        rules = ingress.get("rules") if isinstance(ingress, dict) else None
        for i, rule in enumerate(rules if isinstance(rules, list) else []):
            if not isinstance(rule, dict):
                continue
            path: FieldPath = ("spec", "ingress", "rules", i)
            match = rule.get("match")
            event = match.get("event") if isinstance(match, dict) else None
            if isinstance(event, str) and connector is not None and event not in events:
                # SHOULD, not MUST (connectors.md §3): a connector may take the name from the
                # payload (the built-in webhook's body "event"), so the rule stays valid.
                guess = did_you_mean(event, sorted(events))
                declared_hint = f"declared events: {', '.join(sorted(events))}" if events else \
                    "the Connector declares no events"
                ck.warning(
                    "W_CONFIG_UNKNOWN_EVENT",
                    f"event {event!r} is not declared by Connector {connector.name!r}",
                    (*path, "match", "event"),
                    f"did you mean {guess!r}? (fine as it is if the connector emits {event!r})"
                    if guess
                    else f"{declared_hint}; fine as it is if the connector emits {event!r}",
                )
            route = rule.get("route")
            if isinstance(route, dict) and "agentRef" in route:
                agent = self._ref(res, ck, route["agentRef"], (*path, "route", "agentRef"), "Agent")
                if agent is not None and swarm_agents is not None and swarm is not None \
                        and all(a is not agent for a in swarm_agents):
                    ck.error(f"route agent {agent.name!r} is not in Swarm {swarm.name!r}",
                             (*path, "route", "agentRef"), f"add it to Swarm {swarm.name}'s agents")


def _order(diag: Diagnostic) -> tuple[str, int, int]:
    return (diag.file or "", diag.line or 0, diag.column or 0)


def _split(diagnostics: list[Diagnostic]) -> tuple[list[Diagnostic], list[Diagnostic]]:
    return [d for d in diagnostics if d.is_error], [d for d in diagnostics if not d.is_error]


def validate_bundle(
    path: str | os.PathLike[str],
    *,
    state_root: Path | None = None,
    strict: bool = False,
    env: Mapping[str, str] | None = None,
    builtin_root: Path | None = None,
) -> ValidationReport:
    """Check the bundle at ``path``; every user problem is in the report (never raised).

    ``strict`` makes warnings count as failures. ``env`` (default ``os.environ``) is used only to
    warn about unset ``valueFrom.env`` variables. ``builtin_root`` replaces the directory of
    packages shipped with goondan (for tests).
    """
    return validate_loaded(
        path, state_root=state_root, strict=strict, env=env, builtin_root=builtin_root
    )[0]


def validate_loaded(
    path: str | os.PathLike[str],
    *,
    state_root: Path | None = None,
    strict: bool = False,
    env: Mapping[str, str] | None = None,
    builtin_root: Path | None = None,
) -> tuple[ValidationReport, LoadResult]:
    """:func:`validate_bundle` plus what the loader read (files, package locations), for the
    bundle cache (:mod:`goondan.config.cache`)."""
    loaded = load_resources(
        path,
        state_root=Path(state_root) if state_root is not None else None,  # resolved when needed
        builtin_root=builtin_root or BUILTIN_ROOT,
    )
    if not loaded.unreadable:
        _Validator(loaded, os.environ if env is None else env).run()
    errors, warnings = _split(sorted(loaded.diagnostics, key=_order))
    valid = not errors and not (strict and warnings)
    bundle = None
    if not errors:
        bundle = Bundle(loaded.root, loaded.package.name if loaded.package else None,
                        loaded.resources, warnings, loaded.files)
    report = ValidationReport(
        valid, errors, warnings, bundle, unreadable=loaded.unreadable, root=loaded.root,
        files=loaded.files, resource_count=len(loaded.resources),
    )
    return report, loaded


def load_bundle(path: str | os.PathLike[str], *, state_root: Path | None = None,
                builtin_root: Path | None = None) -> Bundle:
    """Load and validate; raise :class:`ConfigError` (unreadable) or :class:`BundleError` (invalid).

    Every secret of the bundle set in ``os.environ`` is registered for masking
    (:func:`goondan.config.secretsources.register_bundle_secrets`)."""
    from goondan.config.secretsources import register_bundle_secrets

    bundle = bundle_or_raise(
        validate_bundle(path, state_root=state_root, builtin_root=builtin_root)
    )
    register_bundle_secrets(bundle, os.environ)
    return bundle


def bundle_or_raise(report: ValidationReport) -> Bundle:
    """The report's bundle, else :class:`ConfigError` (unreadable) or :class:`BundleError`
    (invalid)."""
    if report.bundle is not None:
        return report.bundle
    first = report.errors[0]
    if report.unreadable:
        raise ConfigError(
            first.message, code=first.code, suggestion=first.suggestion, location=first.path
        )
    count = len(report.errors)
    raise BundleError(
        f"bundle is invalid ({count} error{'s' if count != 1 else ''}); "
        f"first: [{first.code}] {first.message}",
        report.errors + report.warnings,
        suggestion="run 'goondan validate' to see every problem with its location",
        location=first.path,
    )
