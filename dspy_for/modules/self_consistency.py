"""Self-consistency (Wang et al., 2023): sampled answers, majority vote; all ``k`` samples, or adaptively fewer.

Each sample is one call of the sampling predictor (``dspy.ChainOfThought`` or the FOR Defender's step-by-step
prompt) with its own rollout id ``0, 1, 2, ...`` (its own cache entry) at the sampling temperature, so the
samples of an adaptive run are a prefix of the fixed run's and come from DSPy's cache once either ran.
Samples are drawn in batches of ``batch``; after each batch the stop rule decides, and ``k`` is the cap:

* ``"fixed"``: all ``k`` samples (the paper's self-consistency).
* ``"agreement"``: stop once the majority can no longer be overturned by the samples left within ``k``
  (no answer, seen or not, could overtake or tie-and-win against it): the answer is always the one all
  ``k`` samples would have given.
* ``"beta"``: Adaptive-Consistency's Beta stopping criterion (Aggarwal, Madaan, Yang & Mausam, 2023, "Let's
  Sample Step by Step: Adaptive-Consistency for Efficient Reasoning and Coding with LLMs", EMNLP 2023,
  arXiv:2305.11860): with ``v1``, ``v2`` the votes of the two leading answers, stop once the posterior
  probability that the leader is the more likely answer, ``P(p1 > p2 | v1, v2) = ∫_{1/2}^{1} Beta(x; v1 + 1,
  v2 + 1) dx``, reaches ``threshold`` (the paper's default 0.95; see :func:`beta_confidence`).
* ``"window"``: early-stopping self-consistency (ESC; Li, Yuan, Feng, Pan, Wang, Sun, Wang & Li, 2024,
  "Escape Sky-high Cost: Early-stopping Self-Consistency for Multi-step Reasoning", ICLR 2024,
  arXiv:2401.10480): samples come in windows of ``batch``; stop after a window whose samples all give the
  same answer (the window's answer entropy is zero).

Under every rule the answer is the majority over all samples drawn.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from dataclasses import field as _field
from math import comb
from typing import Any, Final, Literal

import dspy
from dspy.signatures.signature import ensure_signature
from dspy.utils.exceptions import AdapterParseError

from dspy_for.errors import ConfigError
from dspy_for.jsonwalk import jsonable
from dspy_for.metrics import extract_number
from dspy_for.modules import for_signatures as S
from dspy_for.modules import trajectory as T
from dspy_for.modules.role_lms import PerRoleLMs, RoleLMSet
from dspy_for.modules.role_predict import RolePredict, lm_in_use

__all__ = ["STOP_RULES", "SelfConsistency", "StopRule", "Votes", "beta_confidence"]

StopRule = Literal["fixed", "agreement", "beta", "window"]
STOP_RULES: Final[tuple[str, ...]] = ("fixed", "agreement", "beta", "window")
#: why sampling ended: the cap ``k`` was reached, or the rule of ``stop`` fired first
_REASONS: Final[dict[str, str]] = {"agreement": "decided", "beta": "confident", "window": "unanimous_window"}


def _vote_key(value: Any) -> Any:
    number = extract_number(value) if not isinstance(value, bool) else None
    if number is not None:
        return round(number, 6)
    return str(value).strip().lower()


def beta_confidence(v1: int, v2: int) -> float:
    """Adaptive-Consistency's stopping statistic: ``P(p1 > p2)`` given ``v1`` votes for the leading answer and
    ``v2`` for the runner-up, i.e. ``P(X > 1/2)`` for ``X ~ Beta(v1 + 1, v2 + 1)``.

    For integer votes this is exactly ``P(Binomial(v1 + v2 + 1, 1/2) <= v1)`` (the regularized incomplete
    beta function at 1/2), so no numerical integration is needed: 1 vote to 0 gives 0.75, 4 to 0 gives
    31/32 ≈ 0.969 (the first unanimous count over the default threshold 0.95), 6 to 1 gives 0.965.
    """
    n = v1 + v2 + 1
    return sum(comb(n, j) for j in range(v1 + 1)) / 2**n


@dataclass
class Votes:
    """The samples of one call so far, in rollout order: the vote and its replayable record.

    ``trajectory`` holds one ``{"type": "sample", "index": i, "readable": bool, "answer": ...}`` per sample
    (``answer`` is the parsed value of the voted field, ``None`` for an unreadable sample, which also records
    its ``parse_error``).
    """

    field: str  # the voted output field: the signature's first
    samples: list[dspy.Prediction | AdapterParseError] = _field(default_factory=list)
    counts: Counter[Any] = _field(default_factory=Counter)  # vote key -> votes, in order of first appearance
    trajectory: list[dict[str, Any]] = _field(default_factory=list)

    def add(self, sample: dspy.Prediction | AdapterParseError) -> None:
        entry: dict[str, Any] = {"type": "sample", "index": len(self.samples)}
        if isinstance(sample, AdapterParseError):
            entry |= {"readable": False, "answer": None, "parse_error": " ".join(str(sample).split())[:300]}
        else:
            self.counts[_vote_key(sample[self.field])] += 1
            entry |= {"readable": True, "answer": jsonable(sample[self.field])}
        self.samples.append(sample)
        self.trajectory.append(entry)

    @property
    def drawn(self) -> int:
        return len(self.samples)

    @property
    def readable(self) -> int:
        return sum(self.counts.values())

    def leader(self) -> tuple[Any, int]:
        """The leading vote key and its votes (ties: the answer seen first, as ``Counter.most_common``);
        ``(None, 0)`` before any readable sample."""
        return self.counts.most_common(1)[0] if self.counts else (None, 0)

    def support(self) -> float:
        """The leader's votes as a share of all samples drawn (an unreadable sample counts as no agreement)."""
        return self.leader()[1] / self.drawn if self.drawn else 0.0

    def agreement(self) -> float:
        """The leader's votes as a share of the readable samples."""
        return self.leader()[1] / self.readable if self.readable else 0.0

    def decided(self, remaining: int) -> bool:
        """No answer can overturn the leader with ``remaining`` more samples: an answer seen before it must stay
        below it, one seen after it (or never seen) may at most tie, since a tie goes to the answer seen first."""
        key, top = self.leader()
        if top == 0:
            return False
        before = True
        for other, count in self.counts.items():
            if other == key:
                before = False
            elif count + remaining > top or (before and count + remaining == top):
                return False
        return remaining <= top  # an answer not seen yet

    def confidence(self) -> float:
        """:func:`beta_confidence` of the two leading answers (0 before any readable sample)."""
        top = self.counts.most_common(2)
        if not top:
            return 0.0
        return beta_confidence(top[0][1], top[1][1] if len(top) > 1 else 0)

    def window_unanimous(self, size: int) -> bool:
        """The last ``size`` samples are all readable and give one answer."""
        window = self.samples[-size:]
        if len(window) < size or not all(isinstance(s, dspy.Prediction) for s in window):
            return False
        return len({_vote_key(s[self.field]) for s in window if isinstance(s, dspy.Prediction)}) == 1

    def answer(self) -> Any:
        """The leading answer as parsed (JSON-able), ``None`` before any readable sample."""
        return jsonable(self.winner()[self.field]) if self.counts else None

    def winner(self) -> dspy.Prediction:
        """The first sample that gave the leading answer; with no readable sample, its last parse error raised."""
        key, _ = self.leader()
        for s in self.samples:
            if isinstance(s, dspy.Prediction) and _vote_key(s[self.field]) == key:
                return s
        raise next(s for s in reversed(self.samples) if isinstance(s, AdapterParseError))


class SelfConsistency(PerRoleLMs):
    """Sample answers at ``temperature`` and return the most common answer of the first output field among the
    readable samples (see the module docstring for the stop rules and their sources).

    Args:
        signature: any DSPy signature (string or class).
        k: the number of samples (``stop="fixed"``), or their cap (adaptive rules).
        temperature: the sampling temperature of every sample.
        stop: ``"fixed"`` (all ``k``), ``"agreement"`` (until the majority cannot be overturned within ``k``),
            ``"beta"`` (Adaptive-Consistency, until :func:`beta_confidence` reaches ``threshold``) or
            ``"window"`` (ESC, until a window of ``batch`` samples is unanimous).
        batch: samples drawn between two checks of the stop rule (ESC's window size for ``"window"``).
        threshold: the confidence at which ``stop="beta"`` stops (Adaptive-Consistency's default 0.95).
        prompt: ``"cot"`` (``dspy.ChainOfThought(signature)``, predictor ``cot``) or ``"defender"`` (FOR's
            Defender step-by-step prompt, :func:`~dspy_for.modules.for_signatures.defender_signature`,
            predictor ``defender``).

    An unreadable sample (its output does not parse) casts no vote, as in the paper's vote over the parsed
    answers; with none readable the item is unreadable (its last parse error is raised). A failed LM call is
    raised as it is. The prediction carries the chosen sample's fields, ``trajectory`` (each sample's parsed
    answer and whether it was readable, then ``{"type": "stop", "rule", "reason", "samples", "answer"}``,
    ``reason`` one of ``"cap"``, ``"decided"``, ``"confident"``, ``"unanimous_window"``) and ``stats``:
    ``samples`` (drawn), ``readable``, ``agreement`` (the share of the readable samples that gave the chosen
    answer) and, under an adaptive rule, ``k`` (the cap).

    Sample ``i`` uses rollout id ``i``; inside ``dspy.BestOfN`` / ``dspy.Refine`` (whose attempt ``r`` runs
    with an LM of rollout id ``r``) it uses ``r * k + i``, so each attempt draws new samples even from a cache. Its
    LM (``set_lm``, default the configured LM) is kept by compilers and save/load as every role LM is
    (:class:`~dspy_for.modules.PerRoleLMs`).
    """

    def __init__(
        self,
        signature: str | type[dspy.Signature],
        k: int = 5,
        temperature: float = 0.7,
        *,
        stop: StopRule = "fixed",
        batch: int = 2,
        threshold: float = 0.95,
        prompt: Literal["cot", "defender"] = "cot",
    ) -> None:
        super().__init__()
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"`k` must be a positive integer, got {k!r}.")
        if isinstance(temperature, bool) or not isinstance(temperature, int | float) or temperature < 0:
            raise ConfigError(f"`temperature` must be a number >= 0, got {temperature!r}.")
        if stop not in STOP_RULES:
            raise ConfigError(f"`stop` must be one of {', '.join(map(repr, STOP_RULES))}, got {stop!r}.")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ConfigError(f"`batch` must be a positive integer (samples between stop checks), got {batch!r}.")
        if stop == "window" and batch < 2:
            raise ConfigError(
                f"`batch` is the window of `stop = 'window'` and must be >= 2 (one sample is always unanimous), "
                f"got {batch!r}."
            )
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0.5 < threshold < 1:
            raise ConfigError(
                f"`threshold` must be a probability in (0.5, 1) (Adaptive-Consistency uses 0.95), got {threshold!r}."
            )
        if prompt not in ("cot", "defender"):
            raise ConfigError(f"`prompt` must be 'cot' (ChainOfThought) or 'defender' (FOR Defender), got {prompt!r}.")
        self.signature = ensure_signature(signature)
        self.k, self.temperature = k, temperature
        # `batch` is kept as `batch_size`: `self.batch` would hide DSPy's `Module.batch(examples)`
        self.stop, self.batch_size, self.threshold, self.prompt = stop, batch, threshold, prompt
        name = type(self).__name__
        if prompt == "cot":
            self.cot = dspy.ChainOfThought(self.signature)
            self.cot.predict = RolePredict(self.cot.predict.signature, module=name, role="cot")
        else:
            self.defender = RolePredict(S.defender_signature(self.signature), module=name, role="defender")

    def set_lm(self, lm: Any) -> None:
        """Its sampling role's LM (how a user gives it one: the module has no other role). Kept as that role's own
        LM (``role_lm``), so it holds wherever the module sits, inside a program of yours too."""
        if isinstance(lm, RoleLMSet):
            super().set_lm(lm)
            return
        for _, predictor in self.named_predictors():
            predictor.lm = None
            if isinstance(predictor, RolePredict):
                predictor.role_lm = lm
            else:  # pragma: no cover - every sampler is a role predictor
                predictor.lm = lm

    @property
    def sampler(self) -> Any:
        """The sampling predictor: ``cot`` or ``defender``."""
        return self.cot if self.prompt == "cot" else self.defender

    def forward(self, **inputs: Any) -> dspy.Prediction:
        return T.run_sync(self._vote(T.SYNC_CALLS, inputs))

    async def aforward(self, **inputs: Any) -> dspy.Prediction:
        return await self._vote(T.ASYNC_CALLS, inputs)

    async def _vote(self, calls: T.Calls, inputs: dict[str, Any]) -> dspy.Prediction:
        """Sample until the stop rule or the cap ends it, then the majority (written once for sync and async)."""
        votes = self.new_votes()
        reason = await self.draw(calls, inputs, votes, cap=self.k, stop=self.stop)
        chosen = votes.winner()
        stats = {"samples": float(votes.drawn), "readable": float(votes.readable), "agreement": votes.agreement()}
        if self.stop != "fixed":
            stats["k"] = float(self.k)
        trajectory = [*votes.trajectory, self.stop_record(votes, self.stop, reason)]
        return dspy.Prediction(**{k: chosen[k] for k in chosen}, stats=stats, trajectory=trajectory)

    # ------------------------------------------------------------- the sampling loop (also a Cascade's stages)

    def new_votes(self) -> Votes:
        return Votes(next(iter(self.signature.output_fields)))

    async def draw(self, calls: T.Calls, inputs: dict[str, Any], votes: Votes, *, cap: int, stop: StopRule) -> str:
        """Draw samples ``votes.drawn, votes.drawn + 1, ...`` in batches until rule ``stop`` fires or ``cap``
        samples are drawn; the reason (``"cap"`` or the rule's). The rule is checked only while samples
        remain, so a run that reached the cap says ``"cap"``."""
        while votes.drawn < cap:
            for _ in range(min(self.batch_size, cap - votes.drawn)):
                votes.add(await self._sample(calls, inputs, votes.drawn))
            if votes.drawn < cap and self._rule_fires(stop, votes, cap):
                return _REASONS[stop]
        return "cap"

    def stop_record(self, votes: Votes, stop: StopRule, reason: str) -> dict[str, Any]:
        """The trajectory entry that says why sampling ended and what the vote gave."""
        record = {"type": "stop", "rule": stop, "reason": reason, "samples": votes.drawn, "answer": votes.answer()}
        if stop == "beta":
            record["confidence"] = votes.confidence()
        return record

    def _rule_fires(self, stop: StopRule, votes: Votes, cap: int) -> bool:
        if stop == "agreement":
            return votes.decided(cap - votes.drawn)
        if stop == "beta":
            return votes.confidence() >= self.threshold
        if stop == "window":
            return votes.window_unanimous(self.batch_size)
        return False

    async def _sample(self, calls: T.Calls, inputs: dict[str, Any], i: int) -> dspy.Prediction | AdapterParseError:
        try:
            return await calls.predict(self.sampler, {**inputs, "config": self._sample_config(i)})
        except AdapterParseError as unreadable:
            return unreadable

    def _sample_config(self, i: int) -> dict[str, Any]:
        """Sample i's LM config: its own rollout id (its own cache entry) at the sampling temperature."""
        return {"rollout_id": self._rollout_base() * self.k + i, "temperature": self.temperature}

    def _rollout_base(self) -> int:
        """The rollout id of the LM in force (``dspy.BestOfN`` / ``dspy.Refine`` attempts), else 0."""
        lm = next((lm for _, p in self.named_predictors() if (lm := lm_in_use(p)) is not None), None)
        lm = lm or dspy.settings.lm
        base = (getattr(lm, "kwargs", None) or {}).get("rollout_id")
        return base if isinstance(base, int) and not isinstance(base, bool) and base > 0 else 0
