"""Result-cache backends behind `cache.result.ResultCache`: diskcache (embedded) and Redis (shared).

A backend never raises into a request: a failed or slow call is a miss (get) or a no-op (set),
counted in `CacheMetrics.backend_errors` and logged at most once per interval.
"""
