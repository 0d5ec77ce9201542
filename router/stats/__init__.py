"""Online latency and error statistics: observations, decayed sketches, stores.

The execution layer records an `Observation` per attempt in its `finally`; the decision step
reads a `StatsView` per candidate from a `StatsStore` (`LocalStatsStore`, or `RedisStatsStore`
to share with other replicas). Scoring lives in `router.scoring`, SLO tracking in `router.slo`.
"""

from router.stats.decay import Decay, DecayedSums
from router.stats.estimators import ANY, ANY_BUCKET, KeyState, KeySummary, StatKey
from router.stats.observation import PROMPT_BUCKET_EDGES, Observation, prompt_bucket, tpot_s
from router.stats.quantiles import LEVELS, Quantiles
from router.stats.redis_store import RedisStatsStore, RedisSyncConfig
from router.stats.sketch import DecayedSketch
from router.stats.store import LocalStatsStore, StatsConfig, StatsStore, StatsView, StoreStatus
from router.stats.ttft_model import TtftFit, TtftModel

__all__ = [
    "ANY", "ANY_BUCKET", "LEVELS", "PROMPT_BUCKET_EDGES", "Decay", "DecayedSketch",
    "DecayedSums", "KeyState", "KeySummary", "LocalStatsStore", "Observation", "Quantiles",
    "RedisStatsStore", "RedisSyncConfig", "StatKey", "StatsConfig", "StatsStore", "StatsView",
    "StoreStatus", "TtftFit", "TtftModel", "prompt_bucket", "tpot_s",
]
