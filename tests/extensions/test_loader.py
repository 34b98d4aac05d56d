"""Loading extensions: order, register(api), failures (seed 004 §13.1, §13.5; seed 003)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from goondan.errors import ExtensionError
from goondan.extensions import load_extensions
from goondan.extensions.state import MemoryStateStore
from goondan.pipeline.events import EventBus
from goondan.pipeline.registry import PipelineRegistry
from goondan.tools.registry import ToolRegistry
from tests.support.aio import run
from tests.support.pipeline_harness import EXT_FIXTURES, Binding, ext_binding


def load(bindings: list[Binding], **kwargs: object):  # type: ignore[no-untyped-def]
    pipeline, tools, bus = PipelineRegistry(), ToolRegistry(), EventBus()
    ext = run(load_extensions(bindings, pipeline=pipeline, tools=tools, bus=bus, **kwargs))  # type: ignore[arg-type]
    return ext, pipeline, tools, bus


def write(tmp_path: Path, name: str, source: str) -> Binding:
    path = tmp_path / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    return Binding(name=name, entry=path)


def test_register_is_called_in_declaration_order(tmp_path: Path) -> None:
    """seed 004 §13.1 / seed 000 §2 rule 8: register(api) is called in Agent.spec.extensions
    order."""
    order_file = tmp_path / "order.txt"
    bindings = [
        write(
            tmp_path,
            name,
            f"def register(api):\n    open({str(order_file)!r}, 'a').write('{name} ')\n",
        )
        for name in ("c-ext", "a-ext", "b-ext")
    ]
    ext, *_ = load(bindings)
    assert order_file.read_text() == "c-ext a-ext b-ext "
    assert ext.names == ["c-ext", "a-ext", "b-ext"]


def test_registration_order_is_middleware_order() -> None:
    """seed 000 §6.2 rules 2 and 4: the first extension listed is the outermost layer."""
    bindings = [
        ext_binding("outer", file="logging_ext"),
        ext_binding("inner", file="logging_ext"),
    ]
    _, pipeline, _, _ = load(bindings)
    owners = [e.owner for e in pipeline.entries("turn")]
    assert owners == ["outer", "inner"]


def test_async_register_is_awaited_before_the_next_extension(tmp_path: Path) -> None:
    """seed 003 'register(api) pattern': register may be async and is awaited sequentially."""
    first = write(tmp_path, "first", (
        "import asyncio\n"
        "async def register(api):\n"
        "    await asyncio.sleep(0)\n"
        "    api.events.emit('order', 'first-done')\n"
    ))
    second = write(
        tmp_path, "second", "def register(api):\n    api.events.emit('order', 'second')\n"
    )
    pipeline, tools, bus = PipelineRegistry(), ToolRegistry(), EventBus()
    seen: list[str] = []
    bus.on("order", seen.append)
    run(load_extensions([first, second], pipeline=pipeline, tools=tools, bus=bus))
    assert seen == ["first-done", "second"]


def test_register_exception_aborts_with_e_extension_init() -> None:
    """seed 004 §13.5 rules 1, 2, 4 / seed 003: a failing register aborts start with a clear, coded
    error."""
    with pytest.raises(ExtensionError) as info:
        load(
            [
                ext_binding("logging", file="logging_ext"),
                ext_binding("broken", file="broken_register"),
            ]
        )
    error = info.value
    assert error.code == "E_EXTENSION_INIT" and error.exit_code == 3
    assert "'broken'" in error.message and "RuntimeError: database unavailable" in error.message
    assert error.suggestion and error.location and error.location.endswith("broken_register.py")
    assert isinstance(error.__cause__, RuntimeError)


def test_import_errors_and_missing_register_are_init_errors() -> None:
    """seed 004 §13.1: an extension MUST export register(api); import failures abort too."""
    with pytest.raises(ExtensionError, match="does not define register") as info:
        load([ext_binding("nope", file="no_register")])
    assert info.value.code == "E_EXTENSION_INIT"
    with pytest.raises(ExtensionError, match="ImportError") as info:
        load([ext_binding("imp", file="import_error")])
    assert info.value.code == "E_EXTENSION_INIT" and "'imp'" in info.value.message
    with pytest.raises(ExtensionError, match="not found"):
        load([Binding(name="ghost", entry=EXT_FIXTURES / "ghost.py")])


def test_tool_name_rule_violation_in_register_aborts(tmp_path: Path) -> None:
    """seed 004 §13.2.1 rule 6: api.tools.register names MUST follow {resource}__{export}."""
    bad = write(tmp_path, "badtool", (
        "def register(api):\n"
        "    api.tools.register({'name': 'weather'}, lambda ctx, input: 1)\n"
    ))
    with pytest.raises(ExtensionError) as info:
        load([bad])
    assert info.value.code == "E_EXTENSION_INIT" and "E_TOOL_NAME" in info.value.message


def test_failed_load_removes_event_subscriptions(tmp_path: Path) -> None:
    """seed 003: a failed start leaves no listeners behind."""
    listens = write(tmp_path, "listens", "def register(api):\n    api.events.on('x', print)\n")
    pipeline, tools, bus = PipelineRegistry(), ToolRegistry(), EventBus()
    with pytest.raises(ExtensionError):
        run(load_extensions([listens, ext_binding("broken", file="broken_register")],
                            pipeline=pipeline, tools=tools, bus=bus))
    assert bus.listener_count() == 0


def test_duplicate_binding_loads_once(caplog: pytest.LogCaptureFixture) -> None:
    """seed 000 §2 rule 7: deterministic registration; a repeated extension is not registered
    twice."""
    with caplog.at_level(logging.WARNING):
        ext, pipeline, _, _ = load([ext_binding("logging", file="logging_ext")] * 2)
    assert len(ext) == 1 and pipeline.count("turn") == 1
    assert "listed twice" in caplog.text


def test_missing_store_uses_memory_and_all_api_parts_exist() -> None:
    """seed 004 §13.2 / §13.2.1 rule 5: the API is complete even without a persistent store."""
    ext, *_ = load([ext_binding("skills", config={"skills": {"py": "typed"}})])
    api = ext.get("skills").api  # type: ignore[union-attr]
    for part in ("pipeline", "tools", "state", "events", "logger", "config", "name"):
        assert getattr(api, part) is not None
    assert isinstance(ext._store, MemoryStateStore)


def test_module_state_is_not_shared_between_instances() -> None:
    """seed 003 'Agent-specific loading': each instance runs its own copy of the extension."""
    seen: list[list[str]] = []
    for key in ("user-1", "user-2"):
        pipeline, tools, bus = PipelineRegistry(), ToolRegistry(), EventBus()
        bus.on("module-calls", seen.append)
        run(load_extensions([ext_binding("g", file="module_global")], pipeline=pipeline,
                            tools=tools, bus=bus, instance_key=key))
    assert seen == [["user-1"], ["user-2"]]
