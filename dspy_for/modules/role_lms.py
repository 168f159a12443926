"""What a module with one LM per role (FOR-Prompting, the cascade) needs so ``dspy.Refine`` / ``dspy.BestOfN`` work
with it: their ``get_lm`` / ``set_lm`` round trip changes every role's LM in the same way."""

from __future__ import annotations

from typing import Any

import dspy

__all__ = ["PerRoleLMs"]


class PerRoleLMs(dspy.Module):
    """A ``dspy.Module`` whose predictors may each have their own LM."""

    def get_lm(self) -> Any:
        """The first role's LM (or the one LM all roles share); never raises for per-role LMs.

        ``dspy.Refine`` / ``dspy.BestOfN`` copy it with a new rollout id and temperature and hand the copy to
        :meth:`set_lm`, which applies the same change to every role's own LM.
        """
        return next((p.lm for _, p in self.named_predictors() if p.lm is not None), None)

    def set_lm(self, lm: Any) -> None:
        rep = self.get_lm()
        lms = {id(p.lm) for _, p in self.named_predictors() if p.lm is not None}
        if rep is None or len(lms) <= 1 or getattr(lm, "model", None) != getattr(rep, "model", None):
            super().set_lm(lm)
            return
        change = {k: v for k, v in lm.kwargs.items() if rep.kwargs.get(k) != v}
        for _, predictor in self.named_predictors():
            base = predictor.lm if predictor.lm is not None else dspy.settings.lm
            predictor.lm = lm if base is rep else (base.copy(**change) if base is not None else lm)
