"""``goondan serve mcp``: run a swarm as an MCP server on stdin/stdout (docs/serving.md).

The swarm runs in this process as under ``goondan run --foreground`` (orchestrator, agent
processes, the Swarm's Connections), or, when it already runs, this process attaches to it
over its control socket; stdin/stdout carry MCP (:mod:`goondan.swarm.mcp_stdio`).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import click

from goondan.commands.common import bundle_option, get_globals, startup_done

__all__ = ["serve"]


@click.group("serve")
def serve() -> None:
    """Serve a swarm to agent clients (MCP over stdio; HTTP: the mcp-server connector)."""


@serve.command("mcp")
@bundle_option(
    type=click.Path(file_okay=True, dir_okay=True),
    help="Bundle directory (or its goondan.yaml) [default: the current directory].",
)
@click.option("-s", "--swarm", default=None, envvar="GOONDAN_SWARM",
              help="Swarm to serve [env: GOONDAN_SWARM; default: 'default' or the only one].")
@click.option("--connection", default=None,
              help="The Swarm's mcp-server Connection whose config and ingress rules apply "
                   "[default: the first one; without any: the entry agent, no rules].")
@click.option("--agent", "agents", multiple=True,
              help="Expose this agent as the tool ask_<agent> (repeatable) [default: the "
                   "Connection's AGENTS, else the entry agent].")
@click.option("--env-file", default=None, help="Extra .env file read before .env.local and .env.")
def mcp(bundle: str | None, swarm: str | None, connection: str | None, agents: tuple[str, ...],
        env_file: str | None) -> int:
    """Serve the swarm's agents as MCP tools on stdin/stdout, for clients that start a
    server as a command (Claude Desktop, IDEs). Each exposed agent is a tool ask_<agent>
    taking {message, conversation?}; calls of one process share a conversation unless they
    name one. Stops at the end of stdin."""
    import asyncio
    import sys

    from goondan.config.cache import load_bundle_cached
    from goondan.swarm.service import SwarmService, load_env_files

    # stdout is the protocol channel: keep it for MCP and send fd 1 (prints, child processes
    # that inherit it) to stderr.
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    options = get_globals()
    chosen = Path(bundle or options.bundle or ".")
    state_root = options.resolve_state_root()
    project_root = (chosen.parent if chosen.is_file() else chosen).resolve()
    real_env = dict(os.environ)
    load_env_files(project_root, env_file, os.environ, real_env=real_env)
    loaded = load_bundle_cached(chosen, state_root=state_root)
    service = SwarmService(
        loaded, state_root=state_root, swarm=swarm, env_file=env_file, real_env=real_env
    )
    startup_done()
    from goondan.swarm.attach import claim_or_attach

    found = claim_or_attach(service)  # None: this process runs the swarm
    return asyncio.run(_serve(service, connection, agents, channel,
                              attached=Path(found[0].control_socket or "") if found else None))


async def _serve(service: Any, connection: str | None, agents: tuple[str, ...], channel: Any, *,
                 attached: Path | None) -> int:
    import asyncio
    import signal
    import sys

    from goondan.mcp.server import McpServer
    from goondan.swarm.mcp_stdio import (
        MAX_LINE_BYTES,
        exposed_for,
        make_ask,
        make_attached_ask,
        mcp_connection,
        serve_stdio,
    )

    spec = mcp_connection(service.connections.connections, connection)
    exposed = exposed_for(service.bundle, service.swarm, spec, agents, os.environ)
    ask = make_attached_ask(attached) if attached is not None else make_ask(service, spec)
    server = McpServer(exposed, ask, name=f"goondan {service.swarm.name}")
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    async with contextlib.AsyncExitStack() as stack:
        if attached is None:
            await stack.enter_async_context(service)
        serving = asyncio.ensure_future(serve_stdio(server, reader, channel.write))
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, serving.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await serving
    return 0
