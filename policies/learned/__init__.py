"""Learned per-request routing: predict each candidate's probability of success from the prompt.

`features` turns (prompt, task) into a sparse vector, `predictor` holds one linear model per
candidate and fits/loads them, `decide` picks the cheapest candidate whose predicted quality clears
a calibrated threshold, `artifact` saves and loads a versioned trained router. Imports only
scikit-learn, numpy, scipy and the standard library (never `router` or `evals`).
"""

from policies.learned.artifact import load_artifact, save_artifact
from policies.learned.decide import RuleKind, ThresholdRule, choose, choose_matrix
from policies.learned.predictor import SuccessPredictor, fit_predictor

__all__ = [
    "RuleKind",
    "SuccessPredictor",
    "ThresholdRule",
    "choose",
    "choose_matrix",
    "fit_predictor",
    "load_artifact",
    "save_artifact",
]
