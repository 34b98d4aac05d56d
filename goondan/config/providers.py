"""The model providers goondan knows: one table, read by config validation, the adapter
registry (``goondan.llm.registry``), secret masking, ``goondan doctor``, the docs test and the
tests' fake provider (docs/models.md).

Each row is plain data: the name a Model's ``spec.provider`` uses (plus aliases), the factory
that builds its adapter as ``"module:attribute"`` (imported only when a Model is built, so
``import goondan`` never loads urllib3), the variables its key is read from when the Model gives
no ``apiKey``, and its default endpoint.

Third-party providers come from installed Python distributions, the same way as third-party
tools (docs/packages.md "Model providers"): an entry point in the group ``goondan.providers``
names the factory, e.g. ``acme = "acme_goondan.llm:create_model"``. Their names are read from
the distribution's metadata without running its code; a built-in name always wins.

``params`` lists the request fields a provider is known to take besides the canonical
``temperature``, ``maxTokens`` and ``topP`` (docs/models.md): ``goondan validate`` warns about a
``modelConfig.params`` key that is not one of them but is close to one (``temprature``,
``W_CONFIG_UNKNOWN_PARAM``). Other keys still pass through unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BUILTIN_PROVIDERS",
    "CANONICAL_PARAMS",
    "ENTRY_POINT_GROUP",
    "PROVIDERS",
    "PROVIDER_NAMES",
    "Provider",
    "canonical_provider",
    "find_provider",
    "installed_providers",
    "key_variables",
    "known_params",
]

ENTRY_POINT_GROUP = "goondan.providers"


@dataclass(frozen=True)
class Provider:
    """One provider: ``factory(spec, *, retry_policy, base_dir) -> LanguageModel``."""

    name: str
    factory: str  # "module:attribute"
    key_env: tuple[str, ...] = ()  # tried in order when the Model has no apiKey
    endpoint: str = ""  # the default endpoint ("" = none)
    endpoint_required: bool = False  # spec.endpoint must be given
    base_url_env: str | None = None  # the endpoint when spec.endpoint is absent (as the SDKs do)
    aliases: tuple[str, ...] = ()
    distribution: str | None = None  # "name==version" of a third-party provider
    params: tuple[str, ...] = ()  # request fields it takes besides CANONICAL_PARAMS

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


CANONICAL_PARAMS = ("temperature", "maxTokens", "topP")  # translated for every provider

# Chat Completions fields, plus those of the usual OpenAI-compatible local servers (llama.cpp,
# vLLM, Ollama) that docs/models.md suggests.
_OPENAI_PARAMS = (
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "max_tokens",
    "max_completion_tokens",
    "n",
    "response_format",
    "seed",
    "stop",
    "stream_options",
    "tool_choice",
    "parallel_tool_calls",
    "user",
    "reasoning_effort",
    "service_tier",
    "store",
    "metadata",
    "modalities",
    "prediction",
    "audio",
    "verbosity",
    "web_search_options",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "typical_p",
    "repeat_penalty",
    "repetition_penalty",
    "n_predict",
    "cache_prompt",
    "mirostat",
    "grammar",
    "json_schema",
    "keep_alive",
    "options",
)
_ANTHROPIC_PARAMS = (
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "stop_sequences",
    "metadata",
    "tool_choice",
    "thinking",
    "service_tier",
    "container",
    "mcp_servers",
)
_GOOGLE_PARAMS = (
    "topK",
    "maxOutputTokens",
    "candidateCount",
    "stopSequences",
    "responseMimeType",
    "responseSchema",
    "responseJsonSchema",
    "presencePenalty",
    "frequencyPenalty",
    "seed",
    "responseLogprobs",
    "logprobs",
    "thinkingConfig",
    "responseModalities",
    "speechConfig",
    "mediaResolution",
    "generationConfig",
    "safetySettings",
    "toolConfig",
    "cachedContent",
    "labels",
)

BUILTIN_PROVIDERS: tuple[Provider, ...] = (
    Provider(
        "openai",
        "goondan.llm.openai:create_openai",
        ("OPENAI_API_KEY",),
        "https://api.openai.com/v1",
        base_url_env="OPENAI_BASE_URL",
        params=_OPENAI_PARAMS,
    ),
    Provider(
        "openai-compatible",
        "goondan.llm.openai:create_compatible",
        endpoint_required=True,
        params=_OPENAI_PARAMS,
    ),
    Provider(
        "anthropic",
        "goondan.llm.anthropic:create_anthropic",
        ("ANTHROPIC_API_KEY",),
        "https://api.anthropic.com/v1",
        base_url_env="ANTHROPIC_BASE_URL",
        params=_ANTHROPIC_PARAMS,
    ),
    Provider(
        "google",
        "goondan.llm.google:create_google",
        ("GOOGLE_GENERATIVE_AI_API_KEY", "GEMINI_API_KEY"),
        "https://generativelanguage.googleapis.com/v1beta",
        aliases=("gemini",),
        params=_GOOGLE_PARAMS,
    ),
    Provider("scripted", "goondan.llm.testing:create_scripted"),
)

# Every built-in name (aliases included) → its row.
PROVIDERS: dict[str, Provider] = {name: row for row in BUILTIN_PROVIDERS for name in row.names}
PROVIDER_NAMES: tuple[str, ...] = tuple(PROVIDERS)


def known_params(provider: str | None) -> tuple[str, ...] | None:
    """The ``modelConfig.params`` keys a built-in provider is known to take (None: a provider
    this table does not describe, whose parameters are not checked)."""
    row = PROVIDERS.get((provider or "").strip().lower())
    return None if row is None else (*CANONICAL_PARAMS, *row.params)


def key_variables() -> tuple[str, ...]:
    """Every built-in provider's key variables, in table order."""
    return tuple(dict.fromkeys(v for row in BUILTIN_PROVIDERS for v in row.key_env))


def installed_providers() -> dict[str, list[Provider]]:
    """The providers of installed distributions (entry point group ``goondan.providers``), by
    name; several rows under one name are a conflict (``goondan doctor`` warns). Reads metadata
    only: no third-party code runs."""
    import importlib.metadata  # ~10 ms: only when a name is not built in

    out: dict[str, list[Provider]] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = f"{ep.dist.metadata['Name']}=={ep.dist.version}" if ep.dist is not None else "?"
        rows = out.setdefault(ep.name.strip().lower(), [])
        if all(row.distribution != dist for row in rows):  # one distribution seen twice on sys.path
            rows.append(Provider(ep.name.strip().lower(), ep.value.strip(), distribution=dist))
    return out


def find_provider(name: str | None) -> Provider | None:
    """The row of provider ``name`` (case and spaces ignored): built in, else installed; None
    when unknown."""
    key = (name or "").strip().lower()
    if not key or key in PROVIDERS:
        return PROVIDERS.get(key)
    rows = installed_providers().get(key)
    return rows[0] if rows else None


def canonical_provider(name: str | None) -> str | None:
    """The built-in family of provider ``name`` (``gemini`` → ``google``); None otherwise."""
    row = PROVIDERS.get((name or "").strip().lower())
    return row.name if row is not None else None
