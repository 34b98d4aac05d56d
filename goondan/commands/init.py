"""``goondan init``: create a new project (Package first, then Model, Agents, Swarm)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import click

from goondan.errors import ConfigError

__all__ = ["init", "scaffold"]

TEMPLATES = ("default", "multi-agent", "minimal", "package")

_PACKAGE = """apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: {name}
spec:
  version: "0.1.0"
  description: "{name}: a goondan project"
"""

_MODELS = """---
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: claude
spec:
  provider: anthropic
  model: claude-sonnet-4-20250514
  # The key is read from ANTHROPIC_API_KEY (the environment or .env). To read another
  # variable: apiKey: {valueFrom: {env: MY_KEY}}
---
# An offline model for trying things without a key: point an Agent's modelRef at "Model/offline".
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: offline
spec:
  provider: scripted
  model: echo
  options:
    loop: true
    script:
      - text: "Hello! I am the offline scripted model. Set ANTHROPIC_API_KEY and use
          Model/claude for real answers."
"""

# multi-agent: the package depends on @goondan/base (the planner's `agents` tool) and its
# offline model delegates like the real one would: planner → coder → reviewer → answer.
_BASE_DEPENDENCY = """  dependencies:
    - name: "@goondan/base"
      version: "0.1.0"
"""

_OFFLINE_MULTI = """---
# An offline model for trying the swarm without a key: point the Agents' modelRef at
# "Model/offline". It delegates like a real planner would: coder first, then reviewer.
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: offline
spec:
  provider: scripted
  model: offline-planner
  options:
    loop: true
    script:
      - when: '(?im)^write code for: '
        text: "(offline coder) here is a first version: print('hello')"
      - when: '(?im)^review: '
        text: "(offline reviewer) looks right to me."
      - when: '(?s).'
        steps:
          - text: "Planning: the coder writes it first."
            toolCalls:
              - name: agents__request
                args: {target: coder, input: "Write code for: {{input}}"}
          - text: "Now the reviewer checks it."
            toolCalls:
              - name: agents__request
                args: {target: reviewer, input: "Review: {{toolResult.response}}"}
          - text: "Done. The reviewer says: {{toolResult.response}}"
"""

_AGENT = """---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: {agent}
spec:
  modelConfig:
    modelRef: "Model/claude"
    params:
      temperature: 0.2
  prompt:
{prompts}
{tools}"""

_SWARM = """---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: "Agent/{entry}"
  agents:
{agents}
"""

_ROLES = {
    "assistant": "You are a helpful, concise assistant.",
    "planner": (
        "You plan work and delegate it with the agents tool (agents__request): ask the coder "
        "to write the code, then the reviewer to review it, and report the result."
    ),
    "coder": "You write clear, tested code.",
    "reviewer": "You review changes for correctness and clarity.",
}


def _slug(name: str) -> str:
    slug = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    return slug or "my-agent"


def scaffold(path: Path, *, name: str, template: str, force: bool = False) -> list[Path]:
    """Write the project files for ``template`` into ``path``; return the files written."""
    if template not in TEMPLATES:
        raise ConfigError(f"unknown template {template!r}", code="E_INIT_TEMPLATE",
                          suggestion=f"choose one of: {', '.join(TEMPLATES)}")
    if template == "package":  # a package project (pyproject.toml + module), not a bundle
        from goondan.commands.package_scaffold import scaffold_package

        return scaffold_package(path, name=name, force=force)
    manifest = path / "goondan.yaml"
    if not force and (manifest.exists() or (path / "goondan.yml").exists()):
        raise ConfigError(f"{manifest} already exists", code="E_INIT_EXISTS",
                          suggestion="use --force to overwrite, or choose another directory")
    path.mkdir(parents=True, exist_ok=True)
    agents = ["planner", "coder", "reviewer"] if template == "multi-agent" else ["assistant"]
    written: list[Path] = []
    docs = [_PACKAGE.format(name=name), _MODELS]
    if template == "multi-agent":
        docs = [_PACKAGE.format(name=name) + _BASE_DEPENDENCY,
                _MODELS[:_MODELS.index("---\n# An offline model")] + _OFFLINE_MULTI]
    for agent in agents:
        if template == "minimal":
            prompts = f'    system: "{_ROLES[agent]}"'
        else:
            prompt_file = path / "prompts" / f"{agent}.system.md"
            prompt_file.parent.mkdir(parents=True, exist_ok=True)
            prompt_file.write_text(_ROLES[agent] + "\n", encoding="utf-8")
            written.append(prompt_file)
            prompts = f'    systemRef: "./prompts/{agent}.system.md"'
        tools = ('  tools:\n    - ref: {kind: Tool, name: agents, package: "@goondan/base"}\n'
                 if template == "multi-agent" and agent == agents[0] else "")
        docs.append(_AGENT.format(agent=agent, prompts=prompts, tools=tools))
    docs.append(
        _SWARM.format(entry=agents[0], agents="\n".join(f'    - "Agent/{a}"' for a in agents))
    )
    manifest.write_text("".join(docs), encoding="utf-8")
    written.insert(0, manifest)
    if template != "minimal":
        env = path / ".env"
        if not env.exists():
            env.write_text("# ANTHROPIC_API_KEY=sk-ant-...\n", encoding="utf-8")
            written.append(env)
        ignore = path / ".gitignore"
        if not ignore.exists():
            ignore.write_text(".env.local\n.env\n__pycache__/\n", encoding="utf-8")
            written.append(ignore)
    return written


@click.command()
@click.argument("path", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.option("-n", "--name", default=None, help="Package name (default: the directory name).")
@click.option(
    "-t",
    "--template",
    type=click.Choice(TEMPLATES),
    default="default",
    show_default=True,
    help="Project template.",
)
@click.option(
    "--git/--no-git", default=True, show_default=True, help="Run `git init` in the new project."
)
@click.option("-f", "--force", is_flag=True, help="Overwrite an existing goondan.yaml.")
def init(path: Path, name: str | None, template: str, git: bool, force: bool) -> None:
    """Create a new goondan project in PATH (default: the current directory).

    The manifest starts with a Package document, then an Anthropic Model (key from
    ANTHROPIC_API_KEY), an offline scripted Model, the template's Agents and a Swarm named
    "default". Run `goondan validate PATH` next. `-t package` creates a package project
    instead (pyproject.toml building a wheel; same as `goondan package new`).
    """
    path = path.resolve()
    package_name = name or _slug(path.name)
    written = scaffold(path, name=package_name if template == "package" else _slug(package_name),
                       template=template, force=force)
    if git and shutil.which("git") and not (path / ".git").exists():
        # git is a convenience: any failure (no git, read-only) is ignored, as in the reference.
        subprocess.run(["git", "init", "-q", str(path)], check=False, capture_output=True)
    from goondan.commands.common import get_globals

    if get_globals().quiet:
        return
    for file in written:
        click.echo(f"created {file.relative_to(path)}")
    click.echo(f"Project ready in {path}. Next: goondan validate {path}, then try it offline: "
               f"goondan run {path} (with the Agents' modelRef at \"Model/offline\")")
