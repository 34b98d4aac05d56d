"""State-root precedence, workspace ids (Decision 5) and instance directory names (Decision 4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from goondan.errors import WorkspaceError
from goondan.workspace.paths import (
    collision_dir_name,
    instance_dir_name,
    read_user_config,
    resolve_state_root,
    slugify,
    workspace_id_for,
    write_user_config,
)


def test_precedence_cli_then_env_then_config_then_default(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {"HOME": str(home)}
    assert resolve_state_root(None, env) == home / ".goondan"
    write_user_config({"stateRoot": "~/from-config"}, env)
    assert resolve_state_root(None, env) == home / "from-config"
    env["GOONDAN_STATE_ROOT"] = str(tmp_path / "from-env")
    assert resolve_state_root(None, env) == tmp_path / "from-env"
    assert resolve_state_root(str(tmp_path / "cli"), env) == tmp_path / "cli"


def test_relative_config_value_is_relative_to_the_config_dir(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}
    write_user_config({"stateRoot": "state", "other": 1}, env)
    assert resolve_state_root(None, env) == tmp_path / ".goondan" / "state"
    assert read_user_config(env) == {"stateRoot": "state", "other": 1}


def test_resolving_creates_nothing_and_works_with_a_read_only_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o500)
    try:
        root = resolve_state_root(None, {"HOME": str(home)})
        assert root == home / ".goondan" and not root.exists()
        assert resolve_state_root(str(tmp_path / "s"), {"HOME": str(home)}) == tmp_path / "s"
    finally:
        home.chmod(0o700)
    assert list(home.iterdir()) == []


def test_state_root_that_is_a_file_is_rejected(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(WorkspaceError) as info:
        resolve_state_root(str(file), {})
    assert info.value.code == "E_WORKSPACE_STATE_ROOT" and info.value.exit_code == 3


def test_invalid_config_toml_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / ".goondan").mkdir()
    (tmp_path / ".goondan" / "config.toml").write_text("stateRoot = [unclosed")
    with pytest.raises(WorkspaceError) as info:
        resolve_state_root(None, {"HOME": str(tmp_path)})
    assert info.value.code == "E_WORKSPACE_CONFIG" and "config.toml" in (info.value.location or "")


def test_workspace_id_is_slug_plus_path_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "My Project"
    first = workspace_id_for(project, "@acme/Weather Bot")
    assert first.startswith("acme-weather-bot-") and len(first.rsplit("-", 1)[1]) == 8
    assert workspace_id_for(project, "@acme/Weather Bot") == first
    assert workspace_id_for(tmp_path / "other", "@acme/Weather Bot") != first
    assert workspace_id_for(project, None).startswith("my-project-")
    monkeypatch.chdir(tmp_path)
    assert workspace_id_for(Path("My Project"), None) == workspace_id_for(project, None)


def test_slugify_follows_workspace_md() -> None:
    assert slugify("main:prod") == "main-prod"
    assert slugify("  --A__b..c--  ") == "a__b..c"
    assert slugify("!!!") == "default"
    assert len(slugify("x" * 300)) == 128


def test_instance_dir_name_sanitises_like_the_reference() -> None:
    assert (
        instance_dir_name("planner", "slack:C01:1700000000.1") == "planner:slack:C01:1700000000-1"
    )
    assert instance_dir_name("a", "ü/../x") == "a:-----x"
    assert len(instance_dir_name("a", "k" * 500)) == 128
    other = collision_dir_name("a", "k" * 500)
    assert len(other) == 128 and other != instance_dir_name("a", "k" * 500)
