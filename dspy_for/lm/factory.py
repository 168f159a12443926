"""The one place that turns an LM spec into a ``dspy.LM``: :func:`make_lm`.

* Any litellm model string works (``openai/gpt-4.1-mini``, ``ollama_chat/llama3.2:1b``,
  ``hosted_vllm/...``, ``openai/<alias>`` with ``api_base``). API keys come only from the environment.
* ``local/<name>`` is the embedded default: a shared llama.cpp server for a registry model
  (:mod:`dspy_for.lm.server`), reached as ``hosted_vllm/<alias>`` because that litellm route sends
  ``max_tokens`` (the ``openai/`` route sends ``max_completion_tokens``, which the llama.cpp server
  ignores). The alias carries the model file's SHA-256 prefix, so cache entries never mix models.
* Temperature 0 and the DSPy cache are the defaults; the cache lives in ``$DSPY_FOR_CACHE_DIR``.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlparse

import dspy
from dspy.clients.cache import Cache

from dspy_for.errors import ConfigError, ServerError
from dspy_for.lm.usage import UsageRecordingMixin

__all__ = ["LM", "LocalLM", "configure_cache", "describe_lm", "make_lm", "resolve_lm"]

CACHE_DIR_ENV = "DSPY_FOR_CACHE_DIR"
_CACHE_NS_KEY = "dspy_for_cache_namespace"
_LOCAL_PREFIX = "local/"


class _NamespacedCache(Cache):
    """DSPy's cache, with the calling endpoint added to the key (DSPy's own key ignores ``api_base``)."""

    def cache_key(self, request: dict[str, Any], ignored_args_for_cache_key: list[str] | None = None) -> str:
        namespace = dspy.settings.get(_CACHE_NS_KEY)
        if namespace:
            request = {**request, "_dspy_for_endpoint": namespace}
        return super().cache_key(request, ignored_args_for_cache_key)


_configured_dir: str | None = None


def configure_cache(directory: str | os.PathLike[str] | None = None) -> str:
    """Point DSPy's response cache at ``directory`` (default ``$DSPY_FOR_CACHE_DIR`` or the user cache).

    Called by :func:`make_lm`; idempotent. Returns the directory.
    """
    global _configured_dir
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    if directory is None:
        directory = os.environ.get(CACHE_DIR_ENV)
    if directory is None:
        import platformdirs

        directory = os.path.join(platformdirs.user_cache_dir("dspy-for"), "dspy_cache")
    directory = os.fspath(directory)
    if directory != _configured_dir:
        os.makedirs(directory, exist_ok=True)
        dspy.cache = _NamespacedCache(
            enable_disk_cache=True, enable_memory_cache=True, disk_cache_dir=directory,
            disk_size_limit_bytes=10 * 1024**3, memory_max_entries=100_000,
        )
        _configured_dir = directory
    return directory


class LM(UsageRecordingMixin, dspy.LM):
    """A ``dspy.LM`` that records per-role usage and keeps cache entries of different endpoints apart."""

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

    If the server dies (killed, crashed), the next call restarts it and retries once.
    """

    def __init__(self, name: str, *, n_ctx: int | None = None, n_threads: int | None = None, **kwargs: Any) -> None:
        from dspy_for.lm.server import DEFAULT_N_CTX, ensure_server

        self.local_name = name
        self.n_ctx = n_ctx or DEFAULT_N_CTX
        self.n_threads = n_threads
        self.server = ensure_server(name, n_ctx=self.n_ctx, n_threads=n_threads)
        kwargs.setdefault("num_retries", 1)
        super().__init__(
            f"hosted_vllm/{self.server.alias}", api_base=self.server.base_url, api_key="local-no-key", **kwargs
        )

    def _revive(self) -> bool:
        from dspy_for.lm.server import _alive, ensure_server

        if _alive(self.server.pid):
            return False  # the server is alive (maybe busy): the error is not a dead server
        self.server = ensure_server(self.local_name, n_ctx=self.n_ctx, n_threads=self.n_threads)
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

    Options: ``temperature`` (default 0), ``max_tokens``, ``cache`` (default True), ``num_retries``,
    ``api_base`` and any litellm option; for ``local/`` specs also ``n_ctx`` and ``n_threads``.
    """
    if isinstance(spec, dspy.BaseLM):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(
            f"`lm` must be a litellm model string such as 'openai/gpt-4.1-mini' or 'local/qwen2.5-coder-1.5b', "
            f"got {spec!r}."
        )
    configure_cache()
    options.setdefault("temperature", 0.0)
    if "api_key" in options:
        raise ConfigError(
            "Do not pass `api_key` to make_lm: API keys are read from the environment only "
            "(e.g. OPENAI_API_KEY), so they never reach configs, logs or tracking."
        )
    if spec.startswith(_LOCAL_PREFIX):
        name = spec[len(_LOCAL_PREFIX):]
        return LocalLM(name, **options)
    if "/" not in spec:
        raise ConfigError(
            f"LM spec `{spec}` has no provider prefix. Use a litellm model string like 'openai/{spec}', "
            f"or 'local/<name>' for a local model (see `dspy-for models list`)."
        )
    namespace = options.get("api_base")
    return LM(spec, cache_namespace=namespace, **options)


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
        from dspy_for.lm.registry import get_model

        out["spec"] = f"local/{lm.local_name}"
        out["model_sha256"] = get_model(lm.local_name).sha256
    return out
