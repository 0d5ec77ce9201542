"""Request classification: task and risk of each request, from a small linear model and rules.

Public entry points: `load_default_classifier()` (the shipped artifact, loaded once),
`view_from_openai(...)` (wire dicts → `RequestView`), and the types in `types`. Training and the
CLI live in `training` and `cli` and are imported only by the commands that need them.
"""

from router.classify.classifier import (
    LinearClassifier,
    load_classifier,
    load_default_classifier,
)
from router.classify.types import Classifier, Hints, Labels, RequestView
from router.classify.view import view_from_openai

__all__ = [
    "Classifier",
    "Hints",
    "Labels",
    "LinearClassifier",
    "RequestView",
    "load_classifier",
    "load_default_classifier",
    "view_from_openai",
]
