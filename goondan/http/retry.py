"""The one retry policy: which failures and statuses are worth another attempt, and how long to
wait before it.

:class:`RetryPolicy` retries connection failures, timeouts, 408, 409, 429 and every 5xx (the
statuses are configurable), waiting ``random() * min(max_delay, base_delay * 2**n)`` before
the n-th retry ("full jitter"), or the server's ``Retry-After`` / ``retry-after-ms`` capped at
``max_retry_after``. A request that is not idempotent (a POST) is re-sent only when it surely
never reached the server (the connection was refused or timed out), unless the policy says
``retry_non_idempotent=True`` (model calls and OTLP batches: sending one twice costs, but does
no harm).

:func:`send` runs one blocking request under a policy (the OTLP exporter); the model adapters
run their own asynchronous loop on the same policy (``goondan/llm/http.py``), which is why
``sleep`` is an awaitable there and :func:`send` takes its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import urllib3

from goondan.http.failures import Failure, failure_of

__all__ = ["IDEMPOTENT_METHODS", "RetryPolicy", "parse_retry_after", "send"]

_log = logging.getLogger("goondan.http")

IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE"})


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to wait before re-sending a failed request (immutable).

    ``max_retries`` counts re-sends (so at most ``max_retries + 1`` attempts). The statuses
    retried are ``retry_statuses`` and, with ``retry_server_errors``, every 5xx. ``sleep`` is
    awaited between attempts by asynchronous callers; ``random`` and ``clock`` are injectable so
    tests assert every delay without waiting.
    """

    max_retries: int = 2
    base_delay: float = 0.5
    max_delay: float = 8.0
    max_retry_after: float = 60.0
    retry_statuses: frozenset[int] = frozenset({408, 409, 429})
    retry_server_errors: bool = True
    retry_non_idempotent: bool = False
    sleep: Callable[[float], Awaitable[Any]] = field(default=asyncio.sleep, compare=False)
    random: Callable[[], float] = field(default=random.random, compare=False)
    clock: Callable[[], float] = field(default=time.time, compare=False)  # for HTTP-date headers

    def is_retryable_status(self, status: int) -> bool:
        """``retry_statuses`` (408, 409, 429) and every 5xx: a later identical request may pass."""
        return status in self.retry_statuses or (self.retry_server_errors and 500 <= status <= 599)

    def is_retryable(self, error: Any) -> bool:
        """Whether a goondan error is worth another attempt: it says so (``retryable``:
        connection trouble, timeouts, 408/409/429/5xx that are not a validation report) and,
        when it carries an HTTP ``status``, that status is one this policy retries."""
        if not getattr(error, "retryable", False):
            return False
        status = getattr(error, "status", None)
        return self.is_retryable_status(status) if isinstance(status, int) else True

    def may_resend(self, method: str, *, failure: Failure | None = None,
                   status: int | None = None) -> bool:
        """Whether a ``method`` request that ended in ``failure`` (or answered ``status``) is
        retried: a failure before anything was sent always is; anything else only when the
        method is idempotent or the policy allows re-sending any request."""
        if failure is not None:
            if failure.kind in ("bad_response", "invalid_url"):
                return False
            if not failure.sent:
                return True
        elif status is None or not self.is_retryable_status(status):
            return False
        return self.retry_non_idempotent or method.upper() in IDEMPOTENT_METHODS

    def delay_for(self, retry_index: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``retry_index`` (0-based)."""
        if retry_after is not None:
            return max(0.0, min(retry_after, self.max_retry_after))
        ceiling = min(self.max_delay, self.base_delay * (2.0**retry_index))
        return self.random() * ceiling


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds the server asked us to wait: ``retry-after-ms``, then ``Retry-After``.

    ``Retry-After`` is either delay-seconds or an HTTP date (RFC 9110 §10.2.3); unparsable
    values are ignored.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms:
        with contextlib.suppress(ValueError):
            return max(0.0, float(raw_ms) / 1000.0)
    raw = lowered.get("retry-after")
    if not raw:
        return None
    raw = raw.strip()
    with contextlib.suppress(ValueError):
        return max(0.0, float(raw))
    import email.utils  # rare (an HTTP-date Retry-After): not imported at every start

    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def send(pool: urllib3.PoolManager, method: str, url: str, *, policy: RetryPolicy,
         timeout: urllib3.Timeout, body: bytes | None = None,
         headers: Mapping[str, str] | None = None,
         sleep: Callable[[float], Any] = time.sleep) -> urllib3.BaseHTTPResponse:
    """One blocking request (body read in full, redirects not followed), re-sent as ``policy``
    allows. Returns the last response, whatever its status; raises the urllib3 exception of
    the last attempt when none got an answer (sort it with :func:`~goondan.http.failure_of`)."""
    retry_index = 0
    while True:
        try:
            response = pool.request(method, url, body=body, headers=dict(headers or {}),
                                    timeout=timeout, retries=False, redirect=False)
        except Exception as exc:
            failure = failure_of(exc)
            if (failure is None or retry_index >= policy.max_retries
                    or not policy.may_resend(method, failure=failure)):
                raise
            delay = policy.delay_for(retry_index)
            _log.debug("%s %s: %s; retry %d in %.2fs", method, failure.kind, failure.reason,
                       retry_index + 1, delay)
        else:
            if retry_index >= policy.max_retries or not policy.may_resend(
                method, status=response.status
            ):
                return response
            delay = policy.delay_for(
                retry_index, parse_retry_after(response.headers, now=policy.clock())
            )
            _log.debug("%s answered HTTP %d; retry %d in %.2fs", method, response.status,
                       retry_index + 1, delay)
        retry_index += 1
        sleep(delay)
