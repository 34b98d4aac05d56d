"""Exception tree and structured diagnostics.

Every error a user can cause carries a stable ``code`` (``E_<AREA>_<WHAT>``), a message, an
optional suggestion and help URL, and the process ``exit_code`` the CLI uses. Library code raises
these (or returns :class:`Diagnostic` lists); only ``goondan/cli.py`` prints and exits.

    GoondanError                      exit 1   E_INTERNAL
    ├── UsageError                    exit 2   E_USAGE
    ├── ConfigError                   exit 3   E_CONFIG_*   (bundle unreadable, bad env, no swarm)
    │   └── BundleError               exit 4   E_VALIDATION (carries .diagnostics)
    ├── WorkspaceError                exit 3   E_WORKSPACE_*
    │   ├── WorkspaceCorruptError     exit 3   E_WORKSPACE_CORRUPT
    │   └── InstanceLockedError       exit 3   E_INSTANCE_LOCKED
    ├── PipelineError                 exit 1   E_PIPELINE_*
    ├── ExtensionError                exit 3   E_EXTENSION_*
    ├── ToolLoadError                 exit 3   E_TOOL_LOAD
    ├── AgentError                    exit 1   E_AGENT_* (cycles, timeouts, unknown targets)
    │   └── AgentStartError           exit 3   E_AGENT_START_FAILED (e.g. an extension failed)
    ├── IpcError                      exit 1   E_IPC_*
    ├── ConnectorError                exit 1   E_CONNECTOR_*
    │   └── ConnectorEventError       exit 1   E_CONNECTOR_EVENT_INVALID
    ├── McpError                      exit 5   E_MCP_*
    ├── LlmError                      exit 5   E_LLM_*
    │   ├── LlmAuthError              exit 6   E_LLM_AUTH
    │   ├── LlmRateLimitError         exit 5   E_LLM_RATE_LIMIT
    │   ├── LlmTimeoutError           exit 5   E_LLM_TIMEOUT
    │   ├── LlmConnectionError        exit 5   E_LLM_CONNECTION
    │   ├── LlmBadResponseError       exit 5   E_LLM_BAD_RESPONSE
    │   └── LlmHttpError              exit 5   E_LLM_HTTP
    │       └── LlmContextLengthError exit 5   E_LLM_CONTEXT_LENGTH
    └── Interrupted                   exit 130 E_INTERRUPTED
        └── TurnCancelled             exit 130 E_TURN_CANCELLED

:func:`exit_code_of` maps an error code that crossed a boundary as data (a failed turn's
``{code, message}``) back to its class's exit code: the tree above is the only table.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "HELP_URL_BASE",
    "AgentError",
    "AgentStartError",
    "BudgetExceededError",
    "BundleError",
    "ConfigError",
    "ConnectorError",
    "ConnectorEventError",
    "Diagnostic",
    "ExtensionError",
    "GoondanError",
    "InstanceLockedError",
    "Interrupted",
    "IpcError",
    "LlmAuthError",
    "LlmBadResponseError",
    "LlmConnectionError",
    "LlmContextLengthError",
    "LlmError",
    "LlmHttpError",
    "LlmRateLimitError",
    "LlmTimeoutError",
    "McpError",
    "PipelineError",
    "ToolLoadError",
    "TurnCancelled",
    "UsageError",
    "WorkspaceCorruptError",
    "WorkspaceError",
    "exit_code_of",
    "help_url",
]

# Every code has a section in docs/errors.md of the goondan repository (generated from
# docs/errors.d by scripts/build_errors_doc.py); its anchor is the code in lower case.
HELP_URL_BASE = "docs/errors.md"

EXIT_OK = 0
EXIT_GENERAL = 1
EXIT_USAGE = 2
EXIT_CONFIG = 3
EXIT_VALIDATION = 4
EXIT_NETWORK = 5
EXIT_AUTH = 6
EXIT_INTERRUPTED = 130


def help_url(code: str) -> str:
    """The code's section of docs/errors.md in the goondan repository
    (``docs/errors.md#e_usage``)."""
    return f"{HELP_URL_BASE}#{code.lower()}"


@dataclass
class Diagnostic:
    """One problem found while loading or checking something.

    ``file``/``line``/``column`` are 1-based where known; ``resource`` is ``Kind/name`` and
    ``field`` a dotted path such as ``spec.tools[0].ref``.
    """

    code: str
    message: str
    severity: Literal["error", "warning"] = "error"
    file: str | None = None
    line: int | None = None
    column: int | None = None
    resource: str | None = None
    field: str | None = None
    suggestion: str | None = None
    help_url: str | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def path(self) -> str | None:
        """``file:line:col`` (or the parts that are known)."""
        if self.file is None:
            return None
        out = self.file
        if self.line is not None:
            out += f":{self.line}"
            if self.column is not None:
                out += f":{self.column}"
        return out

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def to_dict(self) -> dict[str, Any]:
        """JSON form used by ``--format json`` and logs (camelCase keys, empty fields dropped)."""
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.path is not None:
            out["path"] = self.path
        for key, value in (
            ("resource", self.resource),
            ("field", self.field),
            ("suggestion", self.suggestion),
            ("helpUrl", self.help_url or help_url(self.code)),
        ):
            if value is not None:
                out[key] = value
        out.update(self.extra)
        return out


class GoondanError(Exception):
    """Base class of every goondan error; see the module docstring for the tree."""

    code: str = "E_INTERNAL"
    exit_code: int = EXIT_GENERAL

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        suggestion: str | None = None,
        help_url: str | None = None,
        location: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.suggestion = suggestion
        self.help_url = help_url
        self.location = location

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``--json`` error output, IPC, tool results)."""
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.location:
            out["location"] = self.location
        if self.suggestion:
            out["suggestion"] = self.suggestion
        out["helpUrl"] = self.help_url or help_url(self.code)
        out["exitCode"] = self.exit_code
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"


class UsageError(GoondanError):
    code = "E_USAGE"
    exit_code = EXIT_USAGE


class ConfigError(GoondanError):
    code = "E_CONFIG"
    exit_code = EXIT_CONFIG


class BundleError(ConfigError):
    """A bundle failed validation; ``diagnostics`` holds every problem (errors and warnings)."""

    code = "E_VALIDATION"
    exit_code = EXIT_VALIDATION

    def __init__(self, message: str, diagnostics: list[Diagnostic], **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.diagnostics = diagnostics

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.is_error]


class WorkspaceError(GoondanError):
    code = "E_WORKSPACE"
    exit_code = EXIT_CONFIG


class WorkspaceCorruptError(WorkspaceError):
    code = "E_WORKSPACE_CORRUPT"


class InstanceLockedError(WorkspaceError):
    code = "E_INSTANCE_LOCKED"

    def __init__(self, message: str, *, pid: int | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.pid = pid


class PipelineError(GoondanError):
    code = "E_PIPELINE"


class ExtensionError(GoondanError):
    code = "E_EXTENSION_INIT"
    exit_code = EXIT_CONFIG


class ToolLoadError(GoondanError):
    code = "E_TOOL_LOAD"
    exit_code = EXIT_CONFIG


class AgentError(GoondanError):
    code = "E_AGENT"


class BudgetExceededError(AgentError):
    """A budget of ``Swarm.spec.policy.budget`` / ``Agent.spec.budget`` was exceeded: the turn
    (and the requests of its trace that wait on it) end (docs/observability.md "Budgets")."""

    code = "E_BUDGET_EXCEEDED"


class AgentStartError(AgentError):
    """The target agent's process could not start (a configuration problem of the bundle)."""

    code = "E_AGENT_START_FAILED"
    exit_code = EXIT_CONFIG


class IpcError(GoondanError):
    code = "E_IPC"


class ConnectorError(GoondanError):
    code = "E_CONNECTOR"


class ConnectorEventError(ConnectorError):
    """A value a connector emitted is not a valid ConnectorEvent (nothing is stored)."""

    code = "E_CONNECTOR_EVENT_INVALID"


class McpError(GoondanError):
    """An MCP server could not be started, reached or understood (docs/mcp.md)."""

    code = "E_MCP"
    exit_code = EXIT_NETWORK


class LlmError(GoondanError):
    """A model call failed. ``retryable``: whether an identical request may succeed later
    (the transport's retry policy consults it before retrying).

    Every ``Llm*`` error pickles with all its fields (code, message, suggestion, ``status``,
    ``retry_after`` ...), whatever its constructor asks for."""

    code = "E_LLM"
    exit_code = EXIT_NETWORK
    retryable: bool = False

    def __reduce__(self) -> tuple[Any, ...]:
        # The default rebuilds with cls(*args), which fails for required keyword-only fields
        # (LlmHttpError's status); rebuild without __init__ and restore the attributes instead.
        return _rebuild_error, (type(self), self.args, self.__dict__)


class LlmAuthError(LlmError):
    """No API key, or the provider refused it (401/403): exit 6; never retried."""

    code = "E_LLM_AUTH"
    exit_code = EXIT_AUTH


class LlmRateLimitError(LlmError):
    """The provider answered 429; ``retry_after``: the seconds it asked to wait
    (``Retry-After``), if it said."""

    code = "E_LLM_RATE_LIMIT"
    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class LlmTimeoutError(LlmError):
    """Connecting took too long, or the server went silent longer than ``timeoutMs``."""

    code = "E_LLM_TIMEOUT"
    retryable = True
    # True when the request was sent and the server went silent while (probably) still
    # generating: re-sending it would start the same work again, so it is re-sent at most once.
    waiting_for_reply: bool = False


class LlmConnectionError(LlmError):
    """The provider could not be reached (a refused or reset connection, TLS, an invalid
    endpoint URL)."""

    code = "E_LLM_CONNECTION"
    retryable = True


class LlmBadResponseError(LlmError):
    """The provider answered something goondan cannot read (malformed HTTP or JSON, a
    response of the wrong shape, a stream that ended early)."""

    code = "E_LLM_BAD_RESPONSE"


class LlmHttpError(LlmError):
    """Another HTTP error status; ``status`` is it, and 408, 409 and 5xx are retryable unless
    ``retryable`` says otherwise."""

    code = "E_LLM_HTTP"

    def __init__(
        self, message: str, *, status: int, retryable: bool | None = None, **kwargs: Any
    ) -> None:
        super().__init__(message, **kwargs)
        self.status = status
        self.retryable = (status in (408, 409) or status >= 500) if retryable is None else retryable


class LlmContextLengthError(LlmHttpError):
    """The request does not fit the model's context window (never retried)."""

    code = "E_LLM_CONTEXT_LENGTH"


class Interrupted(GoondanError):
    code = "E_INTERRUPTED"
    exit_code = EXIT_INTERRUPTED


class TurnCancelled(Interrupted):
    """A turn was cancelled (Ctrl-C, ``runtime.cancel``)."""

    code = "E_TURN_CANCELLED"


def _rebuild_error(
    cls: type[GoondanError], args: tuple[Any, ...], state: dict[str, Any]
) -> GoondanError:
    """Unpickle an error without calling its ``__init__`` (see :meth:`LlmError.__reduce__`)."""
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


def _classes(root: type[GoondanError]) -> list[type[GoondanError]]:
    out = [root]
    for sub in root.__subclasses__():
        out.extend(_classes(sub))
    return out


def exit_code_of(code: str) -> int:
    """The exit code of the error class whose ``code`` is ``code``, else of the class whose code
    is the longest prefix of it (``E_LLM_EMPTY_RESPONSE`` → :class:`LlmError`, 5), else 1.

    For errors that crossed a process or turn boundary as ``{code, message}`` data."""
    best: type[GoondanError] | None = None
    for cls in _classes(GoondanError):
        if cls.code == code:
            return cls.exit_code
        if code.startswith(cls.code + "_") and (best is None or len(cls.code) > len(best.code)):
            best = cls
    return best.exit_code if best is not None else EXIT_GENERAL
