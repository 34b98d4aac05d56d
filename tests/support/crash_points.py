"""Deterministic crash injection for the workspace store (tests/workspace/test_crash_points.py).

:func:`crash_at` runs a function in a forked child that SIGKILLs itself at its ``n``-th mutating
file-system call (``write``, ``ftruncate``, ``truncate``, ``replace``, ``rename``, ``link``,
``unlink``); a ``write`` chosen as the crash point is first torn (half of its bytes reach the
file). Enumerating ``n = 1, 2, ...`` until the child completes visits every crash window of
the code under test, in order, without timing luck. Only the child's ``os`` module is patched;
the store itself runs unchanged.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any

MUTATORS = ("write", "ftruncate", "truncate", "replace", "rename", "link", "unlink")


def _install(crash_point: int, tear: bool) -> None:
    count = 0

    def wrap(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def op(*args: Any, **kwargs: Any) -> Any:
            nonlocal count
            count += 1
            if count == crash_point:
                if name == "write" and tear:
                    data = bytes(args[1])
                    if len(data) > 1:
                        real(args[0], data[: len(data) // 2])
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)

        return op

    for name in MUTATORS:
        setattr(os, name, wrap(name, getattr(os, name)))


def crash_at(crash_point: int, action: Callable[[], object], *, tear: bool = True) -> bool:
    """Run ``action`` in a child killed at its ``crash_point``-th mutating call; True if killed."""
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 0
        try:
            _install(crash_point, tear)
            action()
        except BaseException:
            traceback.print_exc(file=sys.stderr)
            code = 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return True
    assert os.WEXITSTATUS(status) == 0, "the action failed in the child (see stderr)"
    return False
