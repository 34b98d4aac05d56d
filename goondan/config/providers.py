"""The model providers goondan knows: the one table ``config`` validates ``spec.provider``
against and ``goondan.llm.registry`` builds adapters from (docs/models.md).

Keys are the names a Model may use; values the adapter family. ``gemini`` is an alias of
``google``.
"""

from __future__ import annotations

__all__ = ["KEY_ENV", "PROVIDERS", "PROVIDER_NAMES", "canonical_provider"]

PROVIDERS: dict[str, str] = {
    "openai": "openai",
    "openai-compatible": "openai-compatible",
    "anthropic": "anthropic",
    "google": "google",
    "gemini": "google",
    "scripted": "scripted",
}
PROVIDER_NAMES: tuple[str, ...] = tuple(PROVIDERS)


def canonical_provider(name: str | None) -> str | None:
    """The adapter family of provider ``name`` (case and spaces ignored); None when unknown."""
    return PROVIDERS.get((name or "").strip().lower())

# The environment variables a provider's key is read from when a Model gives no ``apiKey``
# (the adapters' ``key_env``; every process registers their values as secrets).
KEY_ENV: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "google": ("GOOGLE_GENERATIVE_AI_API_KEY", "GEMINI_API_KEY"),
}
