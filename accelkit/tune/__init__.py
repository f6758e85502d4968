"""``accelkit tune``: search the recipes valid on this device, measured by the bench runner and gated on
accuracy (see ``search``). It sits above ``bench`` and ``recipes``, which never import it."""

from accelkit.tune.search import Trial, TuneConfig, TuneResult, candidate_recipes, snippet, tune

__all__ = ["Trial", "TuneConfig", "TuneResult", "candidate_recipes", "snippet", "tune"]
