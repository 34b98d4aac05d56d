"""A small file tool for the approvals example: delete, write and list files in the workdir."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _path(ctx: Any, relative: str) -> Path:
    root = Path(ctx.workdir).resolve()
    path = (root / relative).resolve()
    if root not in path.parents:
        raise ValueError(f"{relative!r} is outside the workdir")
    return path


def delete(ctx: Any, args: dict[str, Any]) -> str:
    path = _path(ctx, args["path"])
    if not path.exists():
        return f"{args['path']} did not exist"
    path.unlink()
    return f"deleted {args['path']}"


def write(ctx: Any, args: dict[str, Any]) -> str:
    path = _path(ctx, args["path"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(args["text"], encoding="utf-8")
    return f"wrote {args['path']}"


def list_files(ctx: Any, args: dict[str, Any]) -> list[str]:
    root = Path(ctx.workdir)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


handlers = {"delete": delete, "write": write, "list": list_files}
