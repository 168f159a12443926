"""The one place that turns an LM spec into a ``dspy.LM``: :func:`make_lm`.

* Any litellm model string works (``openai/gpt-4.1-mini``, ``ollama_chat/llama3.2:1b``,
  ``hosted_vllm/...``, ``openai/<alias>`` with ``api_base``). API keys come only from the environment.
* ``local/<name>`` is the embedded default: a shared llama.cpp server for a registry model
  (:mod:`dspy_for.lm.server`), reached as ``hosted_vllm/<alias>`` because that litellm route sends
  ``max_tokens`` (the ``openai/`` route sends ``max_completion_tokens``, which the llama.cpp server
  ignores). The alias carries the model file's SHA-256 prefix, so cache entries never mix models.
* Temperature 0 and the DSPy cache are the defaults; the cache lives in ``$DSPY_FOR_CACHE_DIR``.
* Requests have a finite default ``timeout`` (:data:`DEFAULT_TIMEOUT` seconds remote,
  :data:`DEFAULT_LOCAL_TIMEOUT` local; ``timeout=None`` leaves litellm's default) and ``num_retries``
  (:data:`DEFAULT_NUM_RETRIES` remote, 1 local).
* :func:`check_lm_spec` and :func:`check_lm_options` validate a spec and its options without starting
  anything, so configs fail before a run starts.
* ``prompt_cache=True`` (``local/`` specs only, off by default) uses the model's prompt-caching server
  (:mod:`dspy_for.lm.server`, docs/prompt_cache.md): each role's repeated prefix is computed once. Its
  answers can differ from the default server's at temperature 0, so it is a result-changing option: it
  enters a run's result key like ``temperature``, and the served alias (hence DSPy's cache key) differs.

Usage of every LM call (any ``dspy.BaseLM``, not only these) is recorded by
:func:`dspy_for.lm.usage.track_usage`; the cache installed here keeps the original call's token counts
with each cached response so a cache hit reports what the original call cost.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

import dspy
import platformdirs

from dspy_for.compat.dspy import UsageKeepingCache, check_supported
from dspy_for.errors import ConfigError, ModelNotFoundError, ServerError
from dspy_for.lm import server as local_server  # the module, so a patched `server.ensure_server` is used
from dspy_for.lm.registry import get_model, list_models

__all__ = [
    "DEFAULT_LOCAL_TIMEOUT",
    "DEFAULT_NUM_RETRIES",
    "DEFAULT_TIMEOUT",
    "LM",
    "LocalLM",
    "check_lm_options",
    "check_lm_spec",
    "configure_cache",
    "describe_lm",
    "make_lm",
    "resolve_lm",
]

CACHE_DIR_ENV = "DSPY_FOR_CACHE_DIR"
_CACHE_NS_KEY = "dspy_for_cache_namespace"
_LOCAL_PREFIX = "local/"

#: default request timeout in seconds for remote LMs (a hung endpoint fails the call instead of the run)
DEFAULT_TIMEOUT = 120.0
#: default request timeout for the local llama.cpp server (CPU generation of queued requests is slow)
DEFAULT_LOCAL_TIMEOUT = 600.0
#: default retries of a failed request for remote LMs (local servers keep 1: a dead server is revived)
DEFAULT_NUM_RETRIES = 2

_KEY_FIX = (
    "keys come from the environment only: set OPENAI_API_KEY (or the provider's variable, e.g. "
    "ANTHROPIC_API_KEY) before running, so keys never reach configs, logs or tracking"
)


_TRANSPORT_KEYS = ("timeout", "num_retries")


class _NamespacedCache(UsageKeepingCache):
    """DSPy's cache, with the calling endpoint added to the key (DSPy's own key ignores ``api_base``).

    Cache hits keep the original call's usage (see :class:`dspy_for.compat.dspy.UsageKeepingCache`).
    """

    def cache_key(self, request: dict[str, Any], ignored_args_for_cache_key: list[str] | None = None) -> str:
        # how a request travels (timeout, retries) never changes its answer: not part of the key, so a new
        # default timeout does not turn every cached answer into a miss
        request = {k: v for k, v in request.items() if k not in _TRANSPORT_KEYS}
        namespace = dspy.settings.get(_CACHE_NS_KEY)
        if namespace:
            request = {**request, "_dspy_for_endpoint": namespace}
        return super().cache_key(request, ignored_args_for_cache_key)


_configured_dir: str | None = None


def configure_cache(directory: str | os.PathLike[str] | None = None) -> str:
    """Point DSPy's response cache at ``directory`` (default ``$DSPY_FOR_CACHE_DIR`` or the user cache).

    Called by :func:`make_lm`; idempotent. Returns the directory. Works for every LM that uses DSPy's
    cache (also a plain ``dspy.LM``): cache hits then report the original call's tokens.
    """
    global _configured_dir
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    if directory is None:
        directory = os.environ.get(CACHE_DIR_ENV)
    if directory is None:
        directory = os.path.join(platformdirs.user_cache_dir("dspy-for"), "dspy_cache")
    directory = os.fspath(directory)
    if directory != _configured_dir or not isinstance(dspy.cache, _NamespacedCache):
        check_supported()
        os.makedirs(directory, exist_ok=True)
        dspy.cache = _NamespacedCache(
            enable_disk_cache=True,
            enable_memory_cache=True,
            disk_cache_dir=directory,
            disk_size_limit_bytes=10 * 1024**3,
            memory_max_entries=100_000,
        )
        _configured_dir = directory
    return directory


# ------------------------------------------------------------------------------------------ checks


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
    if spec.startswith(_LOCAL_PREFIX):
        name = spec[len(_LOCAL_PREFIX) :]
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


def _is_secret_key(key: str) -> bool:
    """``api_key``, ``*secret*``, ``*password*``, ``*token*`` — but not token counts (``max_tokens``)."""
    k = key.lower().replace("-", "_")
    if any(marker in k for marker in ("api_key", "apikey", "secret", "password")):
        return True
    return "token" in k and not k.endswith("tokens")


def check_lm_options(options: Mapping[str, Any]) -> None:
    """Validate LM options (as given to :func:`make_lm`) without building anything.

    Type-checks the known options (``timeout``, ``num_retries``, ``api_base``, ``temperature``,
    ``max_tokens``, ``prompt_cache``) and refuses any secret-looking key (``api_key``, ``*token*``, ``*secret*``,
    ``*password*``): keys come from the environment only. Other litellm options pass through.
    """
    if options is None:
        return
    if not isinstance(options, Mapping):
        raise ConfigError(f"LM options must be a mapping of option names to values, got {type(options).__name__}.")
    for key in options:
        if not isinstance(key, str):
            raise ConfigError(f"LM option names must be strings, got {key!r}.")
        if _is_secret_key(key):
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
            f"`prompt_cache` must be true or false (the local server's prompt cache), got "
            f"{options['prompt_cache']!r}. Set e.g. --lm-option prompt_cache=true."
        )
    if "max_tokens" in options:
        m = options["max_tokens"]
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m <= 0):
            raise ConfigError(f"`max_tokens` must be a positive integer, got {m!r}. Set e.g. max_tokens=512.")


def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


# ------------------------------------------------------------------------------------------ LMs


class LM(dspy.LM):
    """A ``dspy.LM`` that keeps cache entries of different endpoints apart.

    Usage is recorded by :func:`dspy_for.lm.usage.track_usage` for any LM; this class adds nothing to it.
    """

    def __init__(self, model: str, *, cache_namespace: str | None = None, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.cache_namespace = cache_namespace

    def __call__(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        if self.cache_namespace:
            with dspy.context(**{_CACHE_NS_KEY: self.cache_namespace}):
                return super().__call__(prompt, messages=messages, **kwargs)
        return super().__call__(prompt, messages=messages, **kwargs)

    async def acall(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        if self.cache_namespace:
            with dspy.context(**{_CACHE_NS_KEY: self.cache_namespace}):
                return await super().acall(prompt, messages=messages, **kwargs)
        return await super().acall(prompt, messages=messages, **kwargs)


class LocalLM(LM):
    """An LM on the shared local llama.cpp server of a registry model.

    ``prompt_cache``: use the model's prompt-caching server instead (a separate server, alias and DSPy
    cache entries; see :mod:`dspy_for.lm.server`). If the server dies (killed, crashed), the next call
    restarts it and retries once.
    """

    def __init__(
        self,
        name: str,
        *,
        n_ctx: int | None = None,
        n_threads: int | None = None,
        prompt_cache: bool = False,
        **kwargs: Any,
    ) -> None:
        self.local_name = name
        self.n_ctx = n_ctx or local_server.DEFAULT_N_CTX
        self.n_threads = n_threads
        self.prompt_cache = prompt_cache
        self.server = local_server.ensure_server(name, n_ctx=self.n_ctx, n_threads=n_threads, prompt_cache=prompt_cache)
        kwargs.setdefault("num_retries", 1)
        super().__init__(
            f"hosted_vllm/{self.server.alias}", api_base=self.server.base_url, api_key="local-no-key", **kwargs
        )

    def _revive(self) -> bool:
        if local_server._alive(self.server.pid):
            return False  # the server is alive (maybe busy): the error is not a dead server
        self.server = local_server.ensure_server(
            self.local_name, n_ctx=self.n_ctx, n_threads=self.n_threads, prompt_cache=self.prompt_cache
        )
        self.kwargs["api_base"] = self.server.base_url
        return True

    def __call__(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        try:
            return super().__call__(prompt, messages=messages, **kwargs)
        except Exception as exc:
            try:
                revived = self._revive()
            except Exception as start_exc:
                raise ServerError(
                    f"The local server for `{self.local_name}` is not responding and could not be restarted: "
                    f"{start_exc}"
                ) from exc
            if not revived:
                raise
            return super().__call__(prompt, messages=messages, **kwargs)


def make_lm(spec: str | dspy.BaseLM, **options: Any) -> dspy.BaseLM:
    """Build an LM from a spec: a litellm model string or ``local/<name>``; BaseLMs pass through.

    Options: ``temperature`` (default 0), ``max_tokens``, ``cache`` (default True), ``timeout`` (seconds,
    default :data:`DEFAULT_TIMEOUT`, local :data:`DEFAULT_LOCAL_TIMEOUT`; None: litellm's default),
    ``num_retries`` (default :data:`DEFAULT_NUM_RETRIES`, local 1), ``api_base`` and any litellm option;
    for ``local/`` specs also ``n_ctx``, ``n_threads`` and ``prompt_cache`` (default False: the model's
    prompt-caching server, docs/prompt_cache.md). ``api_key`` is refused: keys come from the environment.
    """
    if isinstance(spec, dspy.BaseLM):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(
            f"`lm` must be a litellm model string such as 'openai/gpt-4.1-mini' or 'local/qwen2.5-coder-1.5b', "
            f"got {spec!r}."
        )
    if "api_key" in options:
        raise ConfigError(
            "Do not pass `api_key` to make_lm: API keys are read from the environment only "
            "(e.g. OPENAI_API_KEY), so they never reach configs, logs or tracking."
        )
    check_lm_options(options)
    if spec.startswith(_LOCAL_PREFIX):
        check_lm_spec(spec)
        if "api_base" in options:
            raise ConfigError(
                f"`api_base` cannot be set for `{spec}`: the local server's address is chosen by dspy-for. "
                "Drop `api_base`, or use 'openai/<name>' with `api_base` for a server you run yourself."
            )
        configure_cache()
        options.setdefault("temperature", 0.0)
        _set_timeout(options, DEFAULT_LOCAL_TIMEOUT)
        return LocalLM(spec[len(_LOCAL_PREFIX) :], **options)
    if "/" not in spec:
        raise ConfigError(
            f"LM spec `{spec}` has no provider prefix. Use a litellm model string like 'openai/{spec}', "
            f"or 'local/<name>' for a local model (see `dspy-for models list`)."
        )
    check_lm_spec(spec)
    if options.pop("prompt_cache", False):
        raise ConfigError(
            f"`prompt_cache` applies to local models only (`local/<name>`), not to `{spec}`: drop it, or use "
            "a local model (see `dspy-for models list`)."
        )
    configure_cache()
    options.setdefault("temperature", 0.0)
    options.setdefault("num_retries", DEFAULT_NUM_RETRIES)
    _set_timeout(options, DEFAULT_TIMEOUT)
    namespace = options.get("api_base")
    return LM(spec, cache_namespace=namespace, **options)


def _set_timeout(options: dict[str, Any], default: float) -> None:
    """Finite default timeout; an explicit ``timeout=None`` means litellm's own default (not passed)."""
    if "timeout" not in options:
        options["timeout"] = default
    elif options["timeout"] is None:
        del options["timeout"]


def resolve_lm(lm: str | dspy.BaseLM | None) -> dspy.BaseLM | None:
    """None stays None (use the configured LM); strings go through :func:`make_lm`."""
    if lm is None or isinstance(lm, dspy.BaseLM):
        return lm
    if isinstance(lm, str):
        return make_lm(lm)
    raise ConfigError(f"Expected an LM spec string or a `dspy.BaseLM`, got {type(lm).__name__}: {lm!r}.")


def describe_lm(lm: dspy.BaseLM | str | None) -> dict[str, Any]:
    """Trackable, secret-free description of an LM: model, endpoint host, sampling options, model hash."""
    if lm is None:
        return {"model": "(configured)"}
    if isinstance(lm, str):
        return {"model": lm}
    kwargs = getattr(lm, "kwargs", {}) or {}
    out: dict[str, Any] = {"model": getattr(lm, "model", type(lm).__name__)}
    for key in ("temperature", "max_tokens"):
        if kwargs.get(key) is not None:
            out[key] = kwargs[key]
    if kwargs.get("api_base"):
        parsed = urlparse(str(kwargs["api_base"]))
        out["api_host"] = parsed.hostname or ""
    if isinstance(lm, LocalLM):
        out["spec"] = f"local/{lm.local_name}"
        out["model_sha256"] = get_model(lm.local_name).sha256
        if lm.prompt_cache:
            out["prompt_cache"] = True
    return out
