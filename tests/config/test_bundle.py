"""The loaded Bundle API: specs, bindings, defaults, scoping, packages, values."""

from __future__ import annotations

from pathlib import Path

import pytest

from goondan import secrets
from goondan.config import ObjectRef, load_bundle, resolve_value, validate_bundle
from goondan.errors import BundleError, ConfigError

SHOWCASE = Path(__file__).resolve().parents[2] / "examples" / "showcase"
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "config"

HEADER = "apiVersion: goondan.ai/v1\n"


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


BASIC = """apiVersion: goondan.ai/v1
kind: Package
metadata: {name: basic}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec: {provider: scripted, model: s}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: a}
spec:
  modelConfig: {modelRef: Model/m}
  prompts: {systemPrompt: hi}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: main}
spec: {entryAgent: a, agents: [a]}
"""


def test_showcase_is_valid_and_uses_every_kind(state_root: Path) -> None:
    report = validate_bundle(SHOWCASE, env={})
    assert report.valid, [d.to_dict() for d in report.errors]
    assert report.errors == [] and report.warnings == []
    bundle = report.bundle
    assert bundle is not None and bundle.package_name == "showcase"
    kinds = {r.kind for r in bundle.resources}
    assert kinds == {
        "Package",
        "Model",
        "Agent",
        "Swarm",
        "Tool",
        "Extension",
        "Connector",
        "Connection",
    }
    assert len(bundle.of_kind("Agent")) == 2


def test_showcase_agent_spec() -> None:
    bundle = load_bundle(SHOWCASE)
    swarm = bundle.swarm_spec()
    assert (swarm.name, swarm.entry_agent, swarm.agents) == (
        "default",
        "assistant",
        ["assistant", "reviewer"],
    )
    assert swarm.max_steps_per_turn == 16 and swarm.shutdown_grace_ms == 10_000
    assert swarm.instance_key == "default"
    agent = bundle.agent_spec("assistant")
    assert agent.system_prompt.startswith(
        "You are a helpful assistant for unit conversions.\n\nAlways show"
    )
    assert agent.model.provider == "scripted" and agent.model.name == "scripted"
    assert agent.params == {"temperature": 0.2, "maxTokens": 1024}
    assert agent.max_steps_per_turn == 16
    [tool] = agent.tools
    assert tool.entry == SHOWCASE / "tools" / "units.py" and tool.entry.is_absolute()
    assert [e.name for e in tool.exports] == ["convert", "list-units"]
    assert tool.error_message_limit == 500  # from the selector's overrides
    assert tool.timeout_ms == 5000
    assert tool.exports[1].parameters == {"type": "object", "properties": {}}
    [ext] = agent.extensions
    assert ext.config == {"level": "debug", "includeArgs": False}  # Decision 6 merge
    assert ext.entry == SHOWCASE / "extensions" / "turn_logger.py"
    reviewer = bundle.agent_spec("reviewer", swarm="default")
    assert reviewer.tools[0].error_message_limit == 1000  # overrides applied to a copy only
    assert reviewer.required_tools == ["units__convert"]
    assert reviewer.workdir == SHOWCASE
    watched = bundle.watched_files()
    assert SHOWCASE / "prompts" / "assistant.md" in watched
    assert SHOWCASE / "tools" / "units.py" in watched
    assert SHOWCASE / "connectors.yaml" in watched


def test_defaults(tmp_path: Path) -> None:
    write(tmp_path, {"goondan.yaml": BASIC + "---\n" + HEADER + (
        "kind: Tool\nmetadata: {name: t}\nspec:\n  entry: ./t.py\n  exports: [{name: run}]\n"),
        "t.py": "handlers = {'run': print}\n"})
    bundle = load_bundle(tmp_path)
    agent = bundle.agent_spec("a")
    assert agent.max_steps_per_turn == 32
    assert agent.parallel_tool_calls is False
    assert agent.workdir == tmp_path
    assert agent.system_prompt == "hi"
    tool = bundle.tool_binding(bundle.get("Tool", "t"))  # type: ignore[arg-type]
    assert (tool.error_message_limit, tool.timeout_ms) == (1000, 120_000)
    swarm = bundle.swarm_spec()  # the only one
    assert swarm.shutdown_grace_ms == 30_000 and swarm.instance_key == "main"


def test_an_agent_workdir_is_relative_to_the_bundle_root(tmp_path: Path) -> None:
    """Decision 16: ``ToolContext.workdir`` defaults to the bundle root and an Agent's
    ``spec.workdir`` sets it (relative to the bundle root)."""
    text = BASIC.replace(
        "  prompts: {systemPrompt: hi}\n", "  prompts: {systemPrompt: hi}\n  workdir: ./work\n"
    )
    bundle = load_bundle(write(tmp_path, {"goondan.yaml": text}))
    assert bundle.agent_spec("a").workdir == tmp_path / "work"


def test_swarm_selection_errors(tmp_path: Path) -> None:
    two = (
        BASIC
        + "---\n"
        + HEADER
        + "kind: Swarm\nmetadata: {name: other}\nspec: {entryAgent: a, agents: [a]}\n"
    )
    bundle = load_bundle(write(tmp_path, {"goondan.yaml": two}))
    with pytest.raises(ConfigError) as err:
        bundle.swarm_spec()
    assert err.value.code == "E_CONFIG_NO_SWARM"
    assert bundle.swarm_spec("other").name == "other"
    with pytest.raises(ConfigError) as err:
        bundle.swarm_spec("nope")
    assert err.value.code == "E_CONFIG_SWARM_NOT_FOUND"
    with pytest.raises(ConfigError) as err:
        bundle.agent_spec("ghost")
    assert err.value.code == "E_CONFIG_AGENT_NOT_FOUND"


def test_load_bundle_raises_with_diagnostics() -> None:
    with pytest.raises(BundleError) as err:
        load_bundle(FIXTURES / "invalid" / "E_CONFIG_REF_NOT_FOUND")
    assert err.value.exit_code == 4
    assert [d.code for d in err.value.errors] == ["E_CONFIG_REF_NOT_FOUND"]
    with pytest.raises(ConfigError) as cerr:
        load_bundle(FIXTURES / "invalid" / "E_CONFIG_PARSE_ERROR")
    assert cerr.value.exit_code == 3 and cerr.value.code == "E_CONFIG_PARSE_ERROR"
    assert cerr.value.location and ":9:" in cerr.value.location


def test_single_file_bundle(tmp_path: Path) -> None:
    path = tmp_path / "anything.yaml"
    path.write_text(BASIC)
    bundle = load_bundle(path)
    assert bundle.root == tmp_path.resolve()
    assert bundle.agent_spec("a").name == "a"


PKG_TOOL = HEADER + "kind: Package\nmetadata: {{name: \"{name}\"}}\n---\n" + HEADER + (
    "kind: Tool\nmetadata: {{name: {tool}}}\nspec:\n  entry: ./t.py\n  exports: [{{name: run}}]\n")


def _with_deps(deps: str, tools: str = "Tool/shared") -> str:
    return BASIC.replace(
        "metadata: {name: basic}", "metadata: {name: basic}\nspec:\n  dependencies:\n" + deps
    ).replace("prompts: {systemPrompt: hi}", f"prompts: {{systemPrompt: hi}}\n  tools: [{tools}]")


def test_builtin_installed_and_path_packages(tmp_path: Path, state_root: Path) -> None:
    builtin = tmp_path / "builtin"
    write(
        builtin,
        {
            "@goondan/base/goondan.yaml": PKG_TOOL.format(name="@goondan/base", tool="bash"),
            "@goondan/base/t.py": "handlers = {'run': print}\n",
        },
    )
    installed = state_root / "packages" / "@acme" / "kit" / "1.2.3"
    write(installed, {"dist/goondan.yaml": PKG_TOOL.format(name="@acme/kit", tool="shared"),
                      # entries are relative to the package root
                      "t.py": "handlers = {'run': print}\n",
                      "goondan.yaml": "this: is ignored because dist/ wins\n"})
    bundle_root = tmp_path / "bundle"
    write(
        bundle_root,
        {
            "goondan.yaml": _with_deps(
                '    - {name: "@goondan/base", version: ^1.0.0}\n'
                '    - {name: "@acme/kit", version: ^1.0.0}\n'
                "    - {name: local-kit, path: ./vendor/local-kit}\n",
                tools="Tool/shared, Tool/bash, {kind: Tool, name: helper, package: local-kit}",
            ),
            "goondan.lock.yaml": "lockfileVersion: 1\npackages:\n  "
            '"@acme/kit@1.0.0": {}\n  "@acme/kit@1.2.3": {}\n',
            "vendor/local-kit/goondan.yaml": PKG_TOOL.format(name="local-kit", tool="helper"),
            "vendor/local-kit/t.py": "handlers = {'run': print}\n",
        },
    )
    report = validate_bundle(bundle_root, state_root=state_root, builtin_root=builtin, env={})
    assert report.valid, [d.to_dict() for d in report.errors]
    bundle = report.bundle
    assert bundle is not None
    # dependencies first, in declaration order; then local resources
    assert [r.package for r in bundle.resources][:6] == ["@goondan/base"] * 2 + [
        "@acme/kit"
    ] * 2 + ["local-kit"] * 2
    tools = {t.name: t for t in bundle.agent_spec("a").tools}
    assert tools["shared"].entry == installed / "t.py"
    assert tools["shared"].package == "@acme/kit"
    assert tools["bash"].entry == builtin / "@goondan/base" / "t.py"
    assert tools["helper"].root == (bundle_root / "vendor" / "local-kit").resolve()
    assert bundle.get("Tool", "bash", package="@goondan/base") is not None


def test_own_scope_wins_over_dependencies(tmp_path: Path, state_root: Path) -> None:
    write(
        tmp_path,
        {
            "goondan.yaml": _with_deps("    - {name: kit, path: ./kit}\n")
            + "---\n"
            + HEADER
            + (
                "kind: Tool\nmetadata: {name: shared}\nspec:\n  "
                "entry: ./t.py\n  exports: [{name: run}]\n"
            ),
            "t.py": "handlers = {'run': print}\n",
            "kit/goondan.yaml": PKG_TOOL.format(name="kit", tool="shared"),
            "kit/t.py": "handlers = {'run': print}\n",
        },
    )
    bundle = load_bundle(tmp_path, state_root=state_root)
    [tool] = bundle.agent_spec("a").tools
    assert tool.package is None and tool.entry == tmp_path / "t.py"
    assert bundle.resolve(ObjectRef("Tool", "shared", "kit"), None) is not None


def test_resolve_value(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "MY_KEY": "sk-test-123456",
        "GOONDAN_SECRET_GITHUB_APP_PRIVATE_KEY": "pem-data-xyz",
        "BLANK": "  ",
    }
    assert resolve_value({"value": "literal-secret"}, env) == "literal-secret"
    assert resolve_value({"valueFrom": {"env": "MY_KEY"}}, env) == "sk-test-123456"
    assert resolve_value({"valueFrom": {"env": "NOT_SET"}}, env) is None
    assert resolve_value({"valueFrom": {"env": "BLANK"}}, env) is None  # never ""
    ref = {"valueFrom": {"secretRef": {"ref": "Secret/github-app", "key": "private_key"}}}
    assert resolve_value(ref, env) == "pem-data-xyz"
    assert resolve_value(None, env) is None
    assert secrets.mask("key=sk-test-123456 pem=pem-data-xyz") == "key=*** pem=***"


def test_model_binding_resolves_api_key(tmp_path: Path) -> None:
    text = BASIC.replace(
        "spec: {provider: scripted, model: s}",
        "spec: {provider: openai, model: gpt, apiKey: {valueFrom: {env: OPENAI_API_KEY}}}",
    )
    report = validate_bundle(write(tmp_path, {"goondan.yaml": text}), env={})
    # CI has no key: not an error
    assert [d.code for d in report.warnings] == ["W_CONFIG_ENV_UNSET"]
    assert report.bundle is not None
    model = report.bundle.agent_spec("a").model
    assert model.resolve_api_key({}) == (None, "OPENAI_API_KEY")
    assert model.resolve_api_key({"OPENAI_API_KEY": "sk-abcdef"}) == ("sk-abcdef", "OPENAI_API_KEY")
    assert "sk-abcdef" not in repr(model) and "sk-abcdef" not in repr(report.bundle.resources)


def test_literal_secret_never_in_repr(tmp_path: Path) -> None:
    text = BASIC.replace("spec: {provider: scripted, model: s}",
                         "spec: {provider: openai, model: gpt, apiKey: {value: sk-literal-zzz}}")
    bundle = load_bundle(write(tmp_path, {"goondan.yaml": text}))
    assert "sk-literal-zzz" not in repr(bundle.resources) + repr(bundle.agent_spec("a"))


def test_tool_export_idempotent_is_a_boolean_defaulting_to_false(tmp_path: Path) -> None:
    """docs/tools.md "Idempotency": ``idempotent: true`` lets a resumed turn run the call again."""
    tool = ("kind: Tool\nmetadata: {name: t}\nspec:\n  entry: ./t.py\n"
            "  exports: [{name: run, idempotent: true}, {name: other}]\n")
    write(
        tmp_path,
        {
            "goondan.yaml": BASIC + "---\n" + HEADER + tool,
            "t.py": "handlers = {'run': print, 'other': print}\n",
        },
    )
    bundle = load_bundle(tmp_path)
    binding = bundle.tool_binding(bundle.get("Tool", "t"))  # type: ignore[arg-type]
    assert [(e.name, e.idempotent) for e in binding.exports] == [("run", True), ("other", False)]
    write(
        tmp_path,
        {
            "goondan.yaml": BASIC
            + "---\n"
            + HEADER
            + tool.replace("idempotent: true", "idempotent: yes please")
        },
    )
    with pytest.raises(BundleError) as info:
        load_bundle(tmp_path)
    assert "idempotent" in str(info.value) or any(
        "idempotent" in d.message for d in info.value.diagnostics
    )
