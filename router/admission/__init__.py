"""Admission control: per-priority concurrency limits, bounded queues, tenant fair share.

`AdmissionController.admit` is the entry point; `parse_priority` reads `x-slorouter-priority`.
Rejections are `TenantRateLimitedError` (429) and `OverloadedError` (503), with `retry_after`,
marked `refused_by_admission` (their codes alone do not say who refused: an upstream may use them).
"""

from router.admission.config import (
    PRIORITIES,
    PRIORITY_HEADER,
    AdmissionPolicy,
    PoolLimits,
    Priority,
    parse_priority,
)
from router.admission.controller import Admission, AdmissionController, HasRemaining
from router.admission.pool import PoolSnapshot

__all__ = [
    "PRIORITIES",
    "PRIORITY_HEADER",
    "Admission",
    "AdmissionController",
    "AdmissionPolicy",
    "HasRemaining",
    "PoolLimits",
    "PoolSnapshot",
    "Priority",
    "parse_priority",
]
