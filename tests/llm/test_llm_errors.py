"""Every ``Llm*`` error class has a docstring and survives pickling with all its fields (an
error crossing a process pool or a ``concurrent.futures`` boundary keeps its code, message,
suggestion, status and retry hints)."""

from __future__ import annotations

import inspect
import pickle

import pytest

import goondan.llm.testing  # noqa: F401 - defines LlmError subclasses of its own
from goondan.errors import LlmError

# A value for each extra constructor field an Llm* class may take.
FIELDS = {"status": 503, "retry_after": 2.5, "retryable": False}


def _all(cls: type[LlmError]) -> list[type[LlmError]]:
    out = [cls]
    for sub in cls.__subclasses__():
        out.extend(_all(sub))
    return out


LLM_ERRORS = [c for c in _all(LlmError) if c.__module__.startswith("goondan.")]


def test_the_llm_errors_are_all_found() -> None:
    names = {c.__name__ for c in LLM_ERRORS}
    assert {
        "LlmAuthError",
        "LlmHttpError",
        "LlmContextLengthError",
        "ScriptExhaustedError",
    } <= names


@pytest.mark.parametrize("cls", LLM_ERRORS, ids=lambda c: c.__name__)
def test_every_llm_error_has_a_docstring(cls: type[LlmError]) -> None:
    doc = cls.__dict__.get("__doc__")
    assert isinstance(doc, str) and len(doc.strip()) > 20, (
        f"{cls.__name__} has no docstring of its own"
    )


@pytest.mark.parametrize("cls", LLM_ERRORS, ids=lambda c: c.__name__)
def test_every_llm_error_survives_pickle_with_its_fields(cls: type[LlmError]) -> None:
    accepted = inspect.signature(cls).parameters
    extra = {k: v for k, v in FIELDS.items() if k in accepted}
    err = cls("the model failed", code="E_LLM_SOMETHING", suggestion="try again",
              location="Model/fast", help_url="https://example.invalid/help", **extra)
    err.waiting_for_reply = True  # an attribute set after construction (LlmTimeoutError does)
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is cls
    assert (copy.code, copy.message, copy.suggestion, copy.location, copy.help_url) == (
        "E_LLM_SOMETHING", "the model failed", "try again", "Model/fast", "https://example.invalid/help")
    assert str(copy) == "the model failed" and copy.args == err.args
    assert vars(copy) == vars(err)  # status, retry_after, retryable, waiting_for_reply ...
    assert copy.to_dict() == err.to_dict() and copy.exit_code == err.exit_code
