"""The local server's prompt cache: each repeated prompt prefix is computed once, and every answer stays a
function of its prompt alone (docs/prompt_cache.md).

Runs inside the server process: :func:`run_prompt_cache_server` is llama-cpp-python's server with a
:class:`PrefixCache` on its model; :func:`dspy_for.lm.server.server_command` starts it (opt-in:
``prompt_cache=True``).
"""

from __future__ import annotations

import argparse
import ctypes
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

__all__ = ["DEFAULT_PROMPT_CACHE_BYTES", "PROMPT_CACHE_CHUNK", "PrefixCache", "run_prompt_cache_server"]

#: the prompt cache's chunk: prompts are evaluated in chunks of this many tokens from their first token, and
#: only whole chunks are reused (it changes answers at the last bit, so it is part of the alias)
PROMPT_CACHE_CHUNK = 64
#: memory for stored prefix states (their key/value cache only) before the least recently used is dropped
DEFAULT_PROMPT_CACHE_BYTES = 1 << 30


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


class PrefixCache:
    """Reuse of evaluated prompt prefixes in a llama-cpp-python ``Llama``, with answers equal to a fresh
    evaluation of each prompt.

    llama.cpp's CPU kernels compute a token's key/value state slightly differently depending on the batch
    it was evaluated in (its size and the token's place in it), and a token generated one at a time
    differs from the same token read as part of a prompt. So a reused prefix is only identical to a fresh
    evaluation when it was evaluated in the same batches. This class makes every evaluation canonical:
    ``n_batch == n_ubatch == chunk``, a prompt is evaluated in chunks counted from its first token, and a
    prefix is reused only up to a chunk boundary and only from chunks of an earlier *prompt* (never
    generated tokens), at least one chunk's worth of the prompt (its last, partial chunk) is always
    evaluated. Reused state is therefore bit-identical to what a fresh evaluation of the prompt computes,
    and an answer depends on its prompt alone — not on the requests before it, nor on what was evicted.

    Sources, longest reusable prefix first: the context itself (the previous prompt's whole chunks) or
    one of the stored prefixes (the whole chunks of earlier prompts, key/value state of sequence 0
    only, least recently used dropped beyond ``capacity_bytes``). Before a new prompt is evaluated, the
    previous prompt's whole chunks are stored unless a stored prefix already covers them.

    Installs itself by wrapping ``llm.generate`` (every completion path of ``Llama`` goes through it)
    and ``llm.create_completion`` (refuses prompt-token logprobs, ``echo`` with ``logprobs``, which a
    restored prefix has no logits for, should the model compute every token's logits). Not thread-safe;
    llama-cpp-python's server serves one request at a time.
    """

    def __init__(self, llm: Any, capacity_bytes: int, log: Callable[[str], None] | None = None) -> None:
        chunk = int(llm.n_batch)
        n_ubatch = int(llm.context_params.n_ubatch)
        if n_ubatch != chunk:
            raise ValueError(f"The prompt cache needs n_batch == n_ubatch, got {chunk} and {n_ubatch}.")
        if getattr(llm, "_is_recurrent", False) or getattr(llm, "_is_hybrid", False) or llm.draft_model is not None:
            raise ValueError("The prompt cache supports transformer models without a draft model only.")
        self.llm = llm
        self.chunk = chunk
        self.capacity_bytes = capacity_bytes
        self.entries: OrderedDict[tuple[int, ...], tuple[np.ndarray, Any, int]] = OrderedDict()
        self.nbytes = 0
        self.prompt = np.zeros(0, dtype=np.intc)  # the prompt the context last evaluated
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self._generate = llm.generate
        self._create_completion = llm.create_completion
        llm.generate = self.generate
        llm.create_completion = self.create_completion

    def create_completion(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("echo") and kwargs.get("logprobs") is not None:
            raise ValueError(
                "Prompt-token logprobs (`echo` with `logprobs`) are not available with the prompt cache: "
                "a reused prefix keeps no logits. Use the server without the prompt cache for them."
            )
        return self._create_completion(*args, **kwargs)

    def generate(self, tokens: Sequence[int], *args: Any, **kwargs: Any) -> Iterator[int]:
        reset = kwargs.get("reset", args[6] if len(args) > 6 else True)
        if reset:
            prompt = np.asarray(list(tokens), dtype=np.intc)
            self._store_context()
            reused, source = self._prepare(prompt)
            self.prompt = prompt
            self.log(
                f"dspy-for prompt cache: reused {reused} of {len(prompt)} prompt tokens ({source}), "
                f"evaluating {len(prompt) - reused}; {len(self.entries)} prefixes stored, {self.nbytes} bytes"
            )
        return self._generate(tokens, *args, **kwargs)

    def _whole_chunks(self) -> int:
        """Leading context tokens evaluated as a fresh evaluation would: the last prompt's whole chunks."""
        llm = self.llm
        n = min(len(self.prompt), int(llm.n_tokens)) // self.chunk * self.chunk
        if n and not np.array_equal(llm.input_ids[:n], self.prompt[:n]):
            return 0
        return n

    def _store_context(self) -> None:
        import llama_cpp

        n = self._whole_chunks()
        if n == 0 or self.capacity_bytes == 0:
            return
        key = tuple(int(t) for t in self.prompt[:n])
        for other in self.entries:
            if len(other) >= n and other[:n] == key:
                self.entries.move_to_end(other)
                return
        llm = self.llm
        if not llm._ctx.kv_cache_seq_rm(0, n, -1):
            return
        llm.n_tokens = n
        size = llama_cpp.llama_state_seq_get_size(llm._ctx.ctx, 0)
        buf = (ctypes.c_uint8 * size)()
        written = int(llama_cpp.llama_state_seq_get_data(llm._ctx.ctx, buf, size, 0))
        if written == 0 or written > self.capacity_bytes:
            return
        for other in [o for o in self.entries if len(o) < n and key[: len(o)] == o]:
            self.nbytes -= self.entries.pop(other)[2]
        self.entries[key] = (np.asarray(key, dtype=np.intc), buf, written)
        self.nbytes += written
        while self.nbytes > self.capacity_bytes:
            self.nbytes -= self.entries.popitem(last=False)[1][2]

    def _prepare(self, prompt: np.ndarray) -> tuple[int, str]:
        """Leave the context holding the longest reusable prefix of ``prompt``; returns its length and source."""
        import llama_cpp

        llm = self.llm
        chunk = self.chunk
        limit = (len(prompt) - 1) // chunk * chunk  # the prompt's last (partial or whole) chunk is always evaluated
        best = min(_common_prefix(llm.input_ids[: self._whole_chunks()], prompt), limit) // chunk * chunk
        source = "context" if best else "none"
        best_key = None
        for key, (tokens, _, _) in self.entries.items():
            k = min(_common_prefix(tokens, prompt), limit) // chunk * chunk
            if k > best:
                best, best_key = k, key
        if best_key is not None:
            tokens, buf, size = self.entries[best_key]
            self.entries.move_to_end(best_key)
            llm._ctx.kv_cache_clear()
            if int(llama_cpp.llama_state_seq_set_data(llm._ctx.ctx, buf, size, 0)) == size:
                llm.input_ids[: len(tokens)] = tokens
                llm.n_tokens = len(tokens)
                source = "stored prefix"
            else:
                best, source = 0, "none: restoring a stored prefix failed"
        if best and not llm._ctx.kv_cache_seq_rm(0, best, -1):
            best, source = 0, "none: partial removal from the key/value cache failed"
        if best == 0:
            llm._ctx.kv_cache_clear()
        llm.n_tokens = best
        return best, source


def run_prompt_cache_server(argv: Sequence[str] | None = None) -> None:
    """Entry point of the prompt-caching server process (see :func:`server_command`).

    Takes llama-cpp-python's server options plus ``--prompt_cache_bytes``; runs its FastAPI app with a
    :class:`PrefixCache` on every model it loads.
    """
    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
    from llama_cpp.server.model import LlamaProxy
    from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings

    argv = list(sys.argv[1:] if argv is None else argv)
    ours = argparse.ArgumentParser(add_help=False)
    ours.add_argument("--prompt_cache_bytes", type=int, default=DEFAULT_PROMPT_CACHE_BYTES)
    cache_args, rest = ours.parse_known_args(argv)
    parser = argparse.ArgumentParser(description="llama-cpp-python's server with dspy-for's prompt cache")
    add_args_from_model(parser, Settings)
    args = parser.parse_args(rest)
    # llama-cpp-python annotates these as returning the class; they return instances
    server_settings: Any = parse_model_from_args(ServerSettings, args)
    model_settings: Any = parse_model_from_args(ModelSettings, args)
    load = LlamaProxy.load_llama_from_model_settings

    def load_with_cache(settings: ModelSettings) -> Any:
        llm = load(settings)
        PrefixCache(llm, cache_args.prompt_cache_bytes)
        print(
            f"dspy-for prompt cache: chunk {llm.n_batch} tokens, {cache_args.prompt_cache_bytes} bytes",
            file=sys.stderr,
            flush=True,
        )
        return llm

    LlamaProxy.load_llama_from_model_settings = staticmethod(load_with_cache)  # type: ignore[method-assign]
    app = create_app(server_settings=server_settings, model_settings=[model_settings])
    uvicorn.run(app, host=server_settings.host, port=server_settings.port)
