"""The one HTTP layer: every urllib3 pool, timeout, retry and urllib3 error of goondan goes
through here (docs/architecture.md "HTTP").

* :mod:`goondan.http.pool` — :func:`new_pool` (the shared defaults: no urllib3 retries, no
  blocking on a full pool), :func:`timeout` (one rule for connect/read/total), and pools whose
  connections an event loop can shut down (:class:`AbortHandle`, ``abortable=True``).
* :mod:`goondan.http.retry` — :class:`RetryPolicy` (which failures and statuses are retried,
  exponential backoff with full jitter, ``Retry-After``; a non-idempotent request is re-sent
  only when it never reached the server, unless the policy allows it) and :func:`send`, a
  blocking request under that policy.
* :mod:`goondan.http.failures` — :func:`failure_of`, the one mapping of urllib3 and socket
  exceptions to a :class:`Failure` kind with a safe reason (no connection reprs, no paths or
  queries, secrets masked); each area turns a kind into its own error code.

Importing this package imports urllib3: areas that must start light import it inside the
function that first needs it.
"""

from __future__ import annotations

from goondan.http.failures import Failure, failure_of, reason, safe_origin
from goondan.http.pool import (
    CONNECT_TIMEOUT_S,
    AbortHandle,
    Response,
    abortable,
    close_response,
    new_pool,
    timeout,
)
from goondan.http.retry import IDEMPOTENT_METHODS, RetryPolicy, parse_retry_after, send

__all__ = [
    "CONNECT_TIMEOUT_S",
    "IDEMPOTENT_METHODS",
    "AbortHandle",
    "Failure",
    "Response",
    "RetryPolicy",
    "abortable",
    "close_response",
    "failure_of",
    "new_pool",
    "parse_retry_after",
    "reason",
    "safe_origin",
    "send",
    "timeout",
]
