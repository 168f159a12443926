"""A cascade that spends tokens where the answer is uncertain, and debates only on disagreement.

::

    samples = Defender(Q) sampled first_samples times                      # stage 1: a cheap first answer
    if support(samples) >= agreement: return majority(samples)
    samples += Defender(Q) sampled on, by the stop rule, up to max_samples   # stage 2: adaptive self-consistency
    if support(samples) >= agreement or not debate: return majority(samples)
    return FOR(Q, rounds, host=True)                                         # stage 3: FOR's debate and its Host

``support`` is the majority answer's votes as a share of all samples drawn (an unreadable sample agrees with
nothing). The sampling stages are one :class:`~dspy_for.modules.SelfConsistency` over the FOR Defender's
step-by-step prompt (named ``samples``: rollout ids ``0, 1, ...``, so stage 2 continues stage 1's samples and
both are a prefix of ``defender_sc``'s at the same temperature); the debate is a
:class:`~dspy_for.modules.FORPrompting` (named ``debate``), which starts from its own first answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import dspy
from dspy.signatures.signature import ensure_signature

from dspy_for.errors import ConfigError
from dspy_for.jsonwalk import jsonable
from dspy_for.lm import resolve_lm
from dspy_for.lm.usage import role, track_usage
from dspy_for.modules import trajectory as T
from dspy_for.modules.for_prompting import FORPrompting
from dspy_for.modules.role_lms import PerRoleLMs
from dspy_for.modules.self_consistency import SelfConsistency, StopRule, Votes

__all__ = ["Cascade"]


class Cascade(PerRoleLMs):
    """Defender samples first, more samples on disagreement, FOR's debate only when disagreement remains.

    Args:
        signature: any DSPy signature (string or class).
        first_samples: stage 1's samples of the Defender's prompt.
        max_samples: the cap on samples over stages 1 and 2 (``== first_samples``: no stage 2).
        agreement: the least ``support`` (the majority's share of the samples drawn) that makes a sampling
            stage's answer final; below it the next stage runs. With 2 first samples, any value above 0.5
            asks for unanimity.
        stop: stage 2's stop rule (see :class:`~dspy_for.modules.SelfConsistency`): ``"agreement"`` (until
            the majority cannot be overturned within ``max_samples``), ``"beta"`` (Adaptive-Consistency),
            ``"window"`` (ESC) or ``"fixed"`` (always up to ``max_samples``).
        batch: stage 2's samples between two checks of its stop rule (the window of ``"window"``).
        threshold: ``stop="beta"``'s confidence threshold.
        temperature: the sampling temperature of stages 1 and 2.
        debate: run stage 3 (FOR's debate with its Host); without it, stage 2's majority is final.
        rounds: the debate's Debater → Defender rounds (N).
        defender_lm, debater_lm, host_lm: per-role LMs (``dspy.BaseLM`` or spec strings; default: the
            configured LM); the sampling stages use the Defender's.

    The prediction has the signature's output fields, ``stats`` (``stage`` that answered, ``samples``,
    ``readable``, ``agreement``, ``support``, ``k`` = ``max_samples``, ``rounds_used`` by the debate, and
    ``tokens.stage1`` … ``tokens.stage3``: the tokens each stage was served, cache hits included, 0 for a stage
    that did not run) and ``trajectory``: each sample (``{"type": "sample", "stage", "index", "readable",
    "answer"}``), stage 2's ``{"type": "stop", ...}``, the debate's turns (``{"type": "debate", "stage": 3,
    "turns": [...]}``) and per stage that ran ``{"type": "stage", "stage", "samples", "answer", "support",
    "settled", "answered", "tokens"}``. A failed LM call in any stage is raised; so is an unreadable item
    (no readable sample and no debate, or an unreadable first answer of the debate).
    """

    lm_parameters: ClassVar[Mapping[str, str]] = {
        "samples.defender": "defender_lm",
        **{f"debate.{name}": param for name, param in FORPrompting.lm_parameters.items()},
    }

    def __init__(
        self,
        signature: str | type[dspy.Signature],
        *,
        first_samples: int = 2,
        max_samples: int = 6,
        agreement: float = 0.6,
        stop: StopRule = "agreement",
        batch: int = 2,
        threshold: float = 0.95,
        temperature: float = 0.7,
        debate: bool = True,
        rounds: int = 1,
        defender_lm: Any = None,
        debater_lm: Any = None,
        host_lm: Any = None,
    ) -> None:
        super().__init__()
        if isinstance(first_samples, bool) or not isinstance(first_samples, int) or first_samples < 1:
            raise ConfigError(f"`first_samples` must be a positive integer, got {first_samples!r}.")
        if isinstance(max_samples, bool) or not isinstance(max_samples, int) or max_samples < first_samples:
            raise ConfigError(
                f"`max_samples` must be an integer >= `first_samples` ({first_samples}), got {max_samples!r}; "
                "set it to `first_samples` for no stage 2."
            )
        if isinstance(agreement, bool) or not isinstance(agreement, int | float) or not 0 < agreement <= 1:
            raise ConfigError(f"`agreement` must be a share in (0, 1] (1 = unanimous), got {agreement!r}.")
        if not isinstance(debate, bool):
            raise ConfigError(f"`debate` must be true or false, got {debate!r}.")
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
            raise ConfigError(f"`rounds` must be an integer >= 0 (the debate's rounds), got {rounds!r}.")
        self.signature = ensure_signature(signature)
        self.first_samples, self.max_samples, self.agreement = first_samples, max_samples, agreement
        self.stop, self.use_debate = stop, debate
        self.samples = SelfConsistency(
            self.signature, max_samples, temperature, stop=stop, batch=batch, threshold=threshold, prompt="defender"
        )
        self.samples.defender.role_lm = defender = resolve_lm(defender_lm)
        self.samples.defender.lm_parameter = "defender_lm"
        self.debate = (
            FORPrompting(
                self.signature, rounds=rounds, host=True, defender_lm=defender, debater_lm=debater_lm, host_lm=host_lm
            )
            if debate
            else None
        )

    def forward(self, **inputs: Any) -> dspy.Prediction:
        return T.run_sync(self._cascade(T.SYNC_CALLS, inputs))

    async def aforward(self, **inputs: Any) -> dspy.Prediction:
        return await self._cascade(T.ASYNC_CALLS, inputs)

    async def _cascade(self, calls: T.Calls, inputs: dict[str, Any]) -> dspy.Prediction:
        """The three stages, written once: ``forward`` runs them with plain calls, ``aforward`` with ``acall``."""
        votes = self.samples.new_votes()
        rec = _Record(votes)

        with track_usage() as used, role(T.DEFENDER):  # stage 1: the first answers
            await self.samples.draw(calls, inputs, votes, cap=self.first_samples, stop="fixed")
        settled = rec.stage(1, self._settled(votes), used.total.served_tokens)

        if not settled and self.max_samples > self.first_samples:  # stage 2: more samples, adaptively
            with track_usage() as used, role(T.DEFENDER):
                reason = await self.samples.draw(calls, inputs, votes, cap=self.max_samples, stop=self.stop)
            stopped = self.samples.stop_record(votes, self.stop, reason)
            settled = rec.stage(2, self._settled(votes), used.total.served_tokens, stopped)

        if settled or self.debate is None:
            rec.answered()
            chosen = votes.winner()  # the majority (raises the last parse error when nothing was readable)
            return rec.prediction({k: chosen[k] for k in self.signature.output_fields}, self.max_samples)

        with track_usage() as used:  # stage 3: FOR's debate with its Host
            debated = await calls.predict(self.debate, dict(inputs))
        outputs = {k: debated[k] for k in self.signature.output_fields}
        rec.debate(debated, outputs, used.total.served_tokens)
        return rec.prediction(outputs, self.max_samples)

    def _settled(self, votes: Votes) -> bool:
        return votes.readable > 0 and votes.support() >= self.agreement


class _Record:
    """One call's trajectory and stats as the stages run; local to the call."""

    def __init__(self, votes: Votes) -> None:
        self.votes = votes
        self.trajectory: list[dict[str, Any]] = []
        self.tokens = {1: 0.0, 2: 0.0, 3: 0.0}
        self.last_stage, self.rounds_used = 0, 0
        self._recorded = 0  # samples already in the trajectory

    def stage(self, stage: int, settled: bool, tokens: int, stopped: dict[str, Any] | None = None) -> bool:
        """A sampling stage's samples, its stop record and its summary (``answered`` is set by :meth:`answered`
        if its answer stays final)."""
        v = self.votes
        new = v.trajectory[self._recorded :]
        self.trajectory += [{**entry, "stage": stage} for entry in new]
        if stopped is not None:
            self.trajectory.append({**stopped, "stage": stage})
        self._recorded = v.drawn
        self.trajectory.append(
            {
                "type": "stage",
                "stage": stage,
                "samples": len(new),
                "answer": v.answer(),
                "support": v.support(),
                "settled": settled,
                "answered": False,
                "tokens": tokens,
            }
        )
        self.tokens[stage], self.last_stage = float(tokens), stage
        return settled

    def answered(self) -> None:
        self.trajectory[-1]["answered"] = True

    def debate(self, pred: dspy.Prediction, outputs: dict[str, Any], tokens: int) -> None:
        self.rounds_used = int(pred.get("rounds_used") or 0)
        self.trajectory.append({"type": "debate", "stage": 3, "turns": list(pred.get("trajectory") or [])})
        answer = jsonable(outputs[self.votes.field])
        self.trajectory.append({"type": "stage", "stage": 3, "answer": answer, "answered": True, "tokens": tokens})
        self.tokens[3], self.last_stage = float(tokens), 3

    def prediction(self, outputs: dict[str, Any], k: int) -> dspy.Prediction:
        v = self.votes
        stats = {
            "stage": float(self.last_stage),
            "samples": float(v.drawn),
            "readable": float(v.readable),
            "agreement": v.agreement(),
            "support": v.support(),
            "k": float(k),
            "rounds_used": float(self.rounds_used),
            **{f"tokens.stage{s}": t for s, t in self.tokens.items()},
        }
        return dspy.Prediction(**outputs, stats=stats, trajectory=self.trajectory)
