"""The one place that turns an LM spec into a ``dspy.LM``: :func:`make_lm`.

* Any litellm model string works (``openai/gpt-4.1-mini``, ``ollama_chat/llama3.2:1b``,
  ``hosted_vllm/...``, ``openai/<alias>`` with ``api_base``). API keys come only from the environment.
* ``local/<name>`` is the embedded default: a shared llama.cpp server for a registry model
  (:mod:`dspy_for.lm.server`), reached as ``hosted_vllm/<alias>`` because that litellm route sends
  ``max_tokens`` (the ``openai/`` route sends ``max_completion_tokens``, which the llama.cpp server
  ignores). The alias carries the model file's SHA-256 prefix, so cache entries never mix models.
* Temperature 0 and the DSPy cache are the defaults; the cache lives in ``$DSPY_FOR_CACHE_DIR``.
* Reasoning and thinking models (:func:`is_reasoning_model`: OpenAI's gpt-5*, o1/o3/o4* as DSPy decides; Anthropic
  models given ``thinking`` or ``reasoning_effort``) run at temperature 1, the only one their providers take, with
  a completion budget of :data:`REASONING_MAX_TOKENS` unless one is given (:func:`lm_defaults`); provider options
  such as ``reasoning_effort`` pass through, and their reasoning tokens are counted apart in usage.
* Requests travel through :mod:`dspy_for.lm.transport`: a finite default ``timeout`` (:data:`DEFAULT_TIMEOUT`
  seconds remote, :data:`DEFAULT_LOCAL_TIMEOUT` local; ``timeout=None`` leaves litellm's default), one adaptive
  concurrency limit per endpoint (``max_connections`` caps it), rate limits retried until ``max_retry_wait``
  seconds and other transient faults ``num_retries`` times (:data:`DEFAULT_NUM_RETRIES` remote, 1 local).
* ``price = {input, output}`` (USD per million tokens) prices an LM that litellm's cost map does not
  (:mod:`dspy_for.lm.pricing`).
* :func:`check_lm_spec` and :func:`check_lm_options` validate a spec and its options without starting
  anything, so configs fail before a run starts.
* ``local/<name>`` takes ``slots``, ``prompt_cache``, ``n_ctx`` and ``n_threads`` (:class:`LocalLM`); its DSPy cache
  entries are kept under its serving identity, so an answer another stack made is never replayed as its own.

Usage of every LM call (any ``dspy.BaseLM``, not only these) is recorded by
:func:`dspy_for.lm.usage.track_usage`; the cache installed here keeps the original call's token counts
with each cached response so a cache hit reports what the original call cost.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextlib import nullcontext
from typing import Any
from urllib.parse import urlparse

import dspy
import platformdirs
from dspy.utils.callback import with_callbacks

from dspy_for._offline import apply_offline_defaults
from dspy_for.compat.dspy import (
    UsageKeepingCache,
    acall_once,
    call_once,
    check_supported,
)
from dspy_for.errors import ConfigError, ServerError
from dspy_for.lm import server as local_server  # the module, so a patched `server.ensure_server` is used
from dspy_for.lm import transport
from dspy_for.lm.epochs import epoch_kwargs
from dspy_for.lm.options import (
    DEFAULT_LOCAL_TIMEOUT,
    DEFAULT_MAX_TOKENS,
    DEFAULT_NUM_RETRIES,
    DEFAULT_TIMEOUT,
    LOCAL_PREFIX,
    REASONING_MAX_TOKENS,
    TRANSPORT_OPTIONS,
    check_lm_options,
    check_lm_spec,
    is_reasoning_model,
    lm_defaults,
)
from dspy_for.lm.origin import remember
from dspy_for.lm.pricing import LOCAL_PRICE, PRICE_ATTR, Price, parse_price
from dspy_for.lm.registry import get_model
from dspy_for.lm.serving import SERVING_ATTR, embedded_identity

__all__ = [
    "DEFAULT_LOCAL_TIMEOUT",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_NUM_RETRIES",
    "DEFAULT_TIMEOUT",
    "LM",
    "REASONING_MAX_TOKENS",
    "TRANSPORT_OPTIONS",
    "LocalLM",
    "check_lm_options",
    "check_lm_spec",
    "configure_cache",
    "describe_lm",
    "is_reasoning_model",
    "lm_defaults",
    "make_lm",
    "resolve_lm",
    "with_transport",
]

CACHE_DIR_ENV = "DSPY_FOR_CACHE_DIR"
_CACHE_NS_KEY = "dspy_for_cache_namespace"


class _NamespacedCache(UsageKeepingCache):
    """DSPy's cache, with the calling endpoint added to the key (DSPy's own key ignores ``api_base``).

    Cache hits keep the original call's usage (see :class:`dspy_for.compat.dspy.UsageKeepingCache`).
    """

    def cache_key(self, request: dict[str, Any], ignored_args_for_cache_key: list[str] | None = None) -> str:
        # how a request travels (timeout, retries) never changes its answer: not part of the key, so a new
        # default timeout does not turn every cached answer into a miss
        request = {k: v for k, v in request.items() if k not in TRANSPORT_OPTIONS}
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
    apply_offline_defaults()
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


# ------------------------------------------------------------------------------------------ LMs


class LM(dspy.LM):
    """A ``dspy.LM`` whose requests travel through :mod:`dspy_for.lm.transport` and whose cache entries of different
    endpoints stay apart.

    Every call waits for a slot of its endpoint's shared, adaptive concurrency limit (``max_connections`` caps it)
    and is retried there: rate limits until ``max_retry_wait`` seconds of waiting, other transient faults
    ``num_retries`` times (DSPy's own retry loop is off: ``self.num_retries`` is 0 and ``retry_policy`` holds the
    setting). A given ``price`` (:class:`~dspy_for.lm.pricing.Price`) prices its calls. Usage is recorded by
    :func:`dspy_for.lm.usage.track_usage` for any LM; this class adds nothing to it.
    """

    def __init__(
        self,
        model: str,
        *,
        cache_namespace: str | None = None,
        num_retries: int = DEFAULT_NUM_RETRIES,
        max_retry_wait: float = transport.DEFAULT_MAX_RETRY_WAIT,
        max_connections: int | None = None,
        price: Price | Mapping[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(model, num_retries=0, **kwargs)
        self.cache_namespace = cache_namespace
        self._set_transport(num_retries, max_retry_wait, max_connections)
        if price is not None:
            setattr(self, PRICE_ATTR, parse_price(price))

    def _set_transport(self, num_retries: int, max_retry_wait: float, max_connections: int | None) -> None:
        self.retry_policy = transport.RetryPolicy(num_retries=num_retries, max_retry_wait=max_retry_wait)
        self.max_connections = max_connections
        self.endpoint = transport.endpoint(self.model, self.kwargs.get("api_base"), max_connections)
        self.num_retries = 0  # the transport retries; DSPy retrying inside each attempt would multiply the waits

    @with_callbacks
    def __call__(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        kwargs = epoch_kwargs(self, kwargs)
        with self._namespace():
            return self.retry_policy.send(self.endpoint, lambda: call_once(self, prompt, messages, dict(kwargs)))

    @with_callbacks
    async def acall(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        kwargs = epoch_kwargs(self, kwargs)
        with self._namespace():
            return await self.retry_policy.asend(
                self.endpoint, lambda: acall_once(self, prompt, messages, dict(kwargs))
            )

    def _namespace(self) -> Any:
        return dspy.context(**{_CACHE_NS_KEY: self.cache_namespace}) if self.cache_namespace else nullcontext()

    def copy(self, **kwargs: Any) -> LM:
        policy = self.retry_policy
        num_retries = kwargs.pop("num_retries", policy.num_retries)
        max_retry_wait = kwargs.pop("max_retry_wait", policy.max_retry_wait)
        max_connections = kwargs.pop("max_connections", self.max_connections)
        new: LM = super().copy(**kwargs)
        new._set_transport(num_retries, max_retry_wait, max_connections)
        return new

    def dump_state(self) -> dict[str, Any]:
        return {**super().dump_state(), "num_retries": self.retry_policy.num_retries}

    def __getstate__(self) -> dict[str, Any]:  # deepcopy, pickle: the endpoint is the process's, found again
        return {k: v for k, v in super().__getstate__().items() if k != "endpoint"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.endpoint = transport.endpoint(self.model, self.kwargs.get("api_base"), self.max_connections)


def with_transport(lm: dspy.BaseLM) -> dspy.BaseLM:
    """``lm`` as a run uses it: a plain ``dspy.LM`` becomes a copy whose calls travel through
    :mod:`dspy_for.lm.transport` (its endpoint's shared limit and retries; its own ``num_retries`` kept for the
    transient faults), sharing the original's history. dspy-for's own LMs and LMs of other classes (which own
    their transport) are returned as they are."""
    if type(lm) is not dspy.LM:
        return lm
    new = lm.copy()
    new.__class__ = LM
    adopted: LM = new  # type: ignore[assignment]
    adopted.history = lm.history
    adopted.cache_namespace = None  # a plain LM's cache entries are DSPy's own: replayed as they are
    adopted._set_transport(lm.num_retries, transport.DEFAULT_MAX_RETRY_WAIT, None)
    return adopted


class LocalLM(LM):
    """An LM on the shared local llama.cpp server of a registry model (:mod:`dspy_for.lm.server`).

    ``slots``: the parallel slots to start the server with (None: :data:`~dspy_for.lm.options.DEFAULT_SLOTS`; a
    running server serves with its own: :attr:`slots`), which also cap its requests in flight unless
    ``max_connections`` is given. ``prompt_cache=False`` sends ``cache_prompt: false`` (each prompt evaluated whole);
    ``n_ctx``: context per slot. A dead server is restarted by the next call, which is retried once."""

    def __init__(
        self,
        name: str,
        *,
        n_ctx: int | None = None,
        n_threads: int | None = None,
        slots: int | None = None,
        prompt_cache: bool = True,
        **kwargs: Any,
    ) -> None:
        self.local_name = name
        self.n_ctx = n_ctx or local_server.DEFAULT_N_CTX
        self.n_threads = n_threads
        self.asked_slots = slots
        self.prompt_cache = prompt_cache
        self.server = local_server.ensure_server(name, n_ctx=self.n_ctx, n_threads=n_threads, slots=slots)
        kwargs.setdefault("num_retries", 1)
        kwargs.setdefault("max_connections", self.server.slots)
        if not prompt_cache:
            kwargs["extra_body"] = {**kwargs.get("extra_body", {}), "cache_prompt": False}
        super().__init__(
            f"hosted_vllm/{self.server.alias}", api_base=self.server.base_url, api_key="local-no-key", **kwargs
        )
        if getattr(self, PRICE_ATTR, None) is None:
            setattr(self, PRICE_ATTR, LOCAL_PRICE)  # a local model costs $0 (its wall time is reported beside)
        self._set_serving()

    @property
    def slots(self) -> int:
        """The slots of the server that answers this LM's requests."""
        return self.server.slots

    def _set_serving(self) -> None:  # what serves its calls, known before any (dspy_for.lm.serving)
        identity = embedded_identity(self.local_name, self.server.build, self.server.slots)
        setattr(self, SERVING_ATTR, identity)
        self.cache_namespace = identity  # DSPy's cache keeps each stack's answers apart

    def _revive(self) -> bool:
        if local_server._alive(self.server.pid):
            return False  # the server is alive (maybe busy): the error is not a dead server
        self.server = local_server.ensure_server(
            self.local_name, n_ctx=self.n_ctx, n_threads=self.n_threads, slots=self.asked_slots
        )
        self.kwargs["api_base"] = self.server.base_url
        self._set_serving()
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
    ``num_retries`` (default :data:`DEFAULT_NUM_RETRIES`, local 1), ``api_base`` and any litellm option; for
    ``local/`` specs also those of :class:`LocalLM`. ``api_key`` is refused: keys come from the environment.
    The LM remembers the spec and options it was built from (:func:`dspy_for.lm.origin.made_from`).
    """
    if isinstance(spec, dspy.BaseLM):
        return spec
    given = dict(options)
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
    if spec.startswith(LOCAL_PREFIX):
        check_lm_spec(spec)
        if "api_base" in options:
            raise ConfigError(
                f"`api_base` cannot be set for `{spec}`: the local server's address is chosen by dspy-for. "
                "Drop `api_base`, or use 'openai/<name>' with `api_base` for a server you run yourself."
            )
        configure_cache()
        options.setdefault("temperature", 0.0)
        _set_timeout(options, DEFAULT_LOCAL_TIMEOUT)
        return remember(LocalLM(spec[len(LOCAL_PREFIX) :], **options), spec, given)
    if "/" not in spec:
        raise ConfigError(
            f"LM spec `{spec}` has no provider prefix. Use a litellm model string like 'openai/{spec}', "
            f"or 'local/<name>' for a local model (see `dspy-for models list`)."
        )
    check_lm_spec(spec)
    local = "slots" if "slots" in options else "prompt_cache" if options.pop("prompt_cache", True) is False else None
    if local:
        raise ConfigError(
            f"`{local}` applies to local models only (`local/<name>`), not to `{spec}`: drop it (give it to the local "
            "roles only: `--role-lm-option ROLE:KEY=VALUE`), or use a local model (see `dspy-for models list`)."
        )
    configure_cache()
    options.update(lm_defaults(spec, options, max_tokens=False))
    if is_reasoning_model(spec, options):
        options.setdefault("max_tokens", REASONING_MAX_TOKENS)
    options.setdefault("num_retries", DEFAULT_NUM_RETRIES)
    _set_timeout(options, DEFAULT_TIMEOUT)
    namespace = options.get("api_base")
    return remember(LM(spec, cache_namespace=namespace, **options), spec, given)


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
    for key in ("temperature", "max_tokens", "reasoning_effort"):
        if kwargs.get(key) is not None:
            out[key] = kwargs[key]
    if kwargs.get("max_completion_tokens") is not None:  # DSPy's name for a reasoning model's budget
        out["max_tokens"] = kwargs["max_completion_tokens"]
    if kwargs.get("api_base"):
        parsed = urlparse(str(kwargs["api_base"]))
        out["api_host"] = parsed.hostname or ""
    if isinstance(lm, LocalLM):
        out["spec"] = f"local/{lm.local_name}"
        out["model_sha256"] = get_model(lm.local_name).sha256
        if not lm.prompt_cache:
            out["prompt_cache"] = False
    return out
