"""LM specs and options, checked without building anything: :func:`check_lm_spec`, :func:`check_lm_options`, and
the rules of reasoning and thinking models (:func:`is_reasoning_model`, :func:`lm_defaults`) — so configs fail
before a run starts, with the option named and the fix."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from dspy_for.compat.dspy import is_openai_reasoning_model
from dspy_for.errors import ConfigError, ModelNotFoundError
from dspy_for.lm.pricing import parse_price
from dspy_for.lm.registry import get_model, list_models
from dspy_for.secrets import is_secret_key

__all__ = [
    "DEFAULT_LOCAL_TIMEOUT",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_NUM_RETRIES",
    "DEFAULT_SLOTS",
    "DEFAULT_TIMEOUT",
    "LOCAL_PREFIX",
    "REASONING_MAX_TOKENS",
    "SERVER_OPTIONS",
    "TRANSPORT_OPTIONS",
    "check_lm_options",
    "check_lm_spec",
    "check_slots",
    "is_reasoning_model",
    "lm_defaults",
    "local_slots",
]

#: the prefix of the embedded models' specs (``local/<name>``)
LOCAL_PREFIX = "local/"

#: default request timeout in seconds for remote LMs (a hung endpoint fails the call instead of the run)
DEFAULT_TIMEOUT = 120.0
#: default request timeout for the local llama.cpp server (CPU generation of queued requests is slow)
DEFAULT_LOCAL_TIMEOUT = 600.0
#: default retries of a transient fault for remote LMs (local servers keep 1: a dead server is revived); rate
#: limits are retried until ``max_retry_wait`` (:data:`dspy_for.lm.transport.DEFAULT_MAX_RETRY_WAIT`)
DEFAULT_NUM_RETRIES = 2
#: the completion budget a run gives an LM when it sets none (``max_tokens`` in a config)
DEFAULT_MAX_TOKENS = 1024
#: the completion budget of a reasoning or thinking model when none is set: reasoning tokens count against it, and
#: DSPy refuses less for OpenAI's reasoning models
REASONING_MAX_TOKENS = 16_000

_KEY_FIX = (
    "keys come from the environment only: set OPENAI_API_KEY (or the provider's variable, e.g. "
    "ANTHROPIC_API_KEY) before running, so keys never reach configs, logs or tracking"
)


#: LM options that change how a request travels or is priced, never what it returns: not part of any result key
#: or cache key
TRANSPORT_OPTIONS = ("timeout", "num_retries", "max_retry_wait", "max_connections", "price")
#: options of the embedded server (``local/<name>``) that choose how it serves, not what a request asks: the serving
#: identity of every answer names them (so ``†`` and ``--rerun-changed`` tell answers served otherwise apart) and
#: DSPy's cache keeps answers apart by that identity, but no result key holds them
SERVER_OPTIONS = ("slots",)

#: requests the embedded server answers at once (its parallel slots, continuously batched), unless ``slots`` says
#: otherwise; the local default of ``num_threads`` follows it
DEFAULT_SLOTS = 4


def check_slots(value: Any, name: str = "slots") -> int:
    """``value`` as a number of slots (an integer >= 1), else a :class:`ConfigError` naming ``name`` and the fix."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"`{name}` must be an integer >= 1 (requests the local server answers at once; 1 serves one at a time), "
            f"got {value!r}. Set e.g. --lm-option slots={DEFAULT_SLOTS}."
        )
    return value


def local_slots(lm: Any, options: Mapping[str, Any] | None = None) -> int | None:
    """The slots of the local server ``lm`` talks to: a ``local/<name>`` spec's ``slots`` option (default
    :data:`DEFAULT_SLOTS`), a built local LM's serving slots; None for any other LM."""
    if isinstance(lm, str):
        return (options or {}).get("slots", DEFAULT_SLOTS) if lm.startswith(LOCAL_PREFIX) else None
    slots = getattr(lm, "slots", None) if getattr(lm, "local_name", None) else None
    return slots if isinstance(slots, int) else None


def check_lm_spec(spec: str) -> None:
    """Validate an LM spec string without starting a server or calling anything.

    Raises :class:`ConfigError` for an empty spec, a spec without a provider prefix, or ``local/<name>``
    with a name the local registry does not have.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(
            f"`lm` must be a litellm model string such as 'openai/gpt-4.1-mini' or 'local/qwen2.5-coder-1.5b', "
            f"got {spec!r}. Set `lm` (or `--lm`) to one."
        )
    if spec != spec.strip():
        raise ConfigError(f"LM spec `{spec}` has leading or trailing whitespace: remove it.")
    if spec.startswith(LOCAL_PREFIX):
        name = spec[len(LOCAL_PREFIX) :]
        try:
            get_model(name)
        except ModelNotFoundError:
            known = ", ".join(f"local/{m.name}" for m in list_models()) or "(none)"
            raise ConfigError(
                f"LM spec `{spec}` names no local model in the registry. Known local models: {known}. "
                f"List them with `dspy-for models list`."
            ) from None
        return
    provider, _, model = spec.partition("/")
    if not model or not provider:
        raise ConfigError(
            f"LM spec `{spec}` has no provider prefix. Use a litellm model string like 'openai/{spec.strip('/')}' "
            f"(with `api_base` for an OpenAI-compatible server), or 'local/<name>' for a local model "
            f"(see `dspy-for models list`)."
        )


def check_lm_options(options: Mapping[str, Any]) -> None:
    """Validate LM options (as given to :func:`make_lm`) without building anything.

    Type-checks the known options (``timeout``, ``num_retries``, ``max_retry_wait``, ``max_connections``,
    ``price``, ``api_base``, ``temperature``, ``max_tokens``, ``prompt_cache``, ``slots``) and refuses any
    secret-looking key (:func:`~dspy_for.secrets.is_secret_key`: ``api_key``, ``*token*``, ``*secret*``, ...): keys
    come from the environment only. Other litellm options pass through.
    """
    if options is None:
        return
    if not isinstance(options, Mapping):
        raise ConfigError(f"LM options must be a mapping of option names to values, got {type(options).__name__}.")
    for key in options:
        if not isinstance(key, str):
            raise ConfigError(f"LM option names must be strings, got {key!r}.")
        if is_secret_key(key):
            raise ConfigError(f"Do not pass `{key}` as an LM option: {_KEY_FIX}.")
    if "timeout" in options:
        t = options["timeout"]
        if t is not None and (not _is_number(t) or not t > 0):
            raise ConfigError(
                f"`timeout` must be a positive number of seconds (or None for litellm's default), got {t!r}. "
                "Set e.g. timeout=120."
            )
    if "num_retries" in options:
        n = options["num_retries"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ConfigError(f"`num_retries` must be an integer >= 0, got {n!r}. Set e.g. num_retries=2.")
    if "api_base" in options:
        base = options["api_base"]
        parsed = urlparse(base) if isinstance(base, str) else None
        if parsed is None or parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(f"`api_base` must be an http(s) URL such as 'http://127.0.0.1:8000/v1', got {base!r}.")
    if "temperature" in options:
        temp = options["temperature"]
        if temp is not None and (not _is_number(temp) or temp < 0):
            raise ConfigError(f"`temperature` must be a number >= 0, got {temp!r}. Set e.g. temperature=0.")
    if "prompt_cache" in options and not isinstance(options["prompt_cache"], bool):
        raise ConfigError(
            f"`prompt_cache` must be true or false (the local server's prompt reuse; false evaluates every prompt "
            f"whole), got {options['prompt_cache']!r}. Set e.g. --lm-option prompt_cache=false."
        )
    if "slots" in options:
        check_slots(options["slots"])
    if "max_retry_wait" in options:
        w = options["max_retry_wait"]
        if not _is_number(w) or w < 0:
            raise ConfigError(
                f"`max_retry_wait` must be a number of seconds >= 0 (the longest one call waits in all between "
                f"retries; 0: no retries), got {w!r}. Set e.g. max_retry_wait=300."
            )
    if "max_connections" in options:
        c = options["max_connections"]
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1):
            raise ConfigError(
                f"`max_connections` must be a positive integer (requests in flight to one endpoint), got {c!r}. "
                "Set e.g. max_connections=8."
            )
    if options.get("price") is not None:
        parse_price(options["price"])
    if "max_tokens" in options:
        m = options["max_tokens"]
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m <= 0):
            raise ConfigError(f"`max_tokens` must be a positive integer, got {m!r}. Set e.g. max_tokens=512.")


def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


#: options that turn on a provider's extended thinking (Anthropic's then takes only temperature 1)
_THINKING_OPTIONS = ("thinking", "reasoning_effort")


def is_reasoning_model(spec: str, options: Mapping[str, Any] | None = None) -> bool:
    """Whether ``spec`` (with ``options``) is a reasoning or thinking model: an OpenAI reasoning model (gpt-5*,
    o1/o3/o4*, as DSPy decides), or an Anthropic model asked to think (``thinking`` or ``reasoning_effort``)."""
    if spec.startswith(LOCAL_PREFIX):
        return False
    if is_openai_reasoning_model(spec):
        return True
    thinking = any((options or {}).get(k) not in (None, False, "none", "disable") for k in _THINKING_OPTIONS)
    return spec.split("/", 1)[0] in ("anthropic", "bedrock", "vertex_ai") and "claude" in spec and thinking


def lm_defaults(spec: str, options: Mapping[str, Any], *, max_tokens: bool = True) -> dict[str, Any]:
    """The sampling settings an LM built from ``spec`` and ``options`` runs with when they do not set them:
    ``temperature`` 0, or 1 for a reasoning model (the only one its provider takes; another given one is a
    :class:`ConfigError`), and (``max_tokens=True``) the completion budget :data:`DEFAULT_MAX_TOKENS`, or
    :data:`REASONING_MAX_TOKENS` for a reasoning model (less given is a :class:`ConfigError`)."""
    out: dict[str, Any] = {}
    if not is_reasoning_model(spec, options):
        out["temperature"] = options.get("temperature", 0.0)
        if max_tokens:
            out["max_tokens"] = options.get("max_tokens") or DEFAULT_MAX_TOKENS
        return out
    temperature = options.get("temperature")
    if temperature is not None and temperature != 1:
        raise ConfigError(
            f"`{spec}` is a reasoning model: its provider accepts only temperature 1, got temperature={temperature!r}. "
            "Drop `temperature` (dspy-for then sends 1) or set temperature=1; sampling differs between runs, so "
            "compare such models over repeated items."
        )
    out["temperature"] = 1.0
    budget = options.get("max_tokens")
    if budget is not None and budget < REASONING_MAX_TOKENS:
        raise ConfigError(
            f"`{spec}` is a reasoning model: its reasoning tokens count against `max_tokens`, which must be at least "
            f"{REASONING_MAX_TOKENS:,} (DSPy's floor for OpenAI's reasoning models), got {budget}. Drop `max_tokens` "
            f"(the default is {REASONING_MAX_TOKENS:,}) or set max_tokens={REASONING_MAX_TOKENS}."
        )
    if max_tokens:
        out["max_tokens"] = budget or REASONING_MAX_TOKENS
    return out
