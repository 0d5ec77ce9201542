"""The passwords in the configured Redis URLs are secrets the log redaction knows
(`router.wiring.secret_values`): every Redis setting, `${NAME}`-substituted or written out,
`redis://:pw@`, `rediss://user:pw@`, percent-encoded or not; a user name stays readable."""

from __future__ import annotations

import io
import logging

from policies.loader import load_config_text
from router.telemetry.redact import REDACTED, RedactingFilter
from router.wiring import secret_values
from tests.support.services import MINIMAL_CONFIG

SERVER = """server:
  cache: {backend: redis, redis_url: 'redis://:cache-pass-4f1a@cache.internal:6379/0'}
  stats: {redis_url: 'rediss://statsuser:stats-pass-9b2c@stats.internal:6380/1'}
  idempotency_redis_url: '${IDEMPOTENCY_REDIS_URL}'
  experiments_redis_url: 'redis://:exp%2Fpass%40x7@exp.internal/2'
"""
ENVIRON = {"IDEMPOTENCY_REDIS_URL": "redis://keys:idem-pass-33d0@keys.internal:6379/3"}


def _logged(message: str, secrets: list[str]) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter(secrets))
    logger = logging.getLogger("tests.redis_password_redaction")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning(message)
    finally:
        logger.removeHandler(handler)
    return stream.getvalue()


def test_a_log_line_with_a_redis_url_password_comes_out_redacted() -> None:
    """Each Redis URL's password (the experiments' even without experiments: set is enough) is
    redacted wherever a log line holds it, in the URL or alone; users and hosts stay
    readable."""
    config = load_config_text(MINIMAL_CONFIG + SERVER, environ=ENVIRON)
    secrets = secret_values(config, ENVIRON)
    line = _logged(
        "redis down: redis://:cache-pass-4f1a@cache.internal:6379/0 "
        "rediss://statsuser:stats-pass-9b2c@stats.internal:6380/1 "
        f"{ENVIRON['IDEMPOTENCY_REDIS_URL']} redis://:exp%2Fpass%40x7@exp.internal/2 "
        "decoded exp/pass@x7", secrets)
    for password in ("cache-pass-4f1a", "stats-pass-9b2c", "idem-pass-33d0", "exp%2Fpass%40x7",
                     "exp/pass@x7"):
        assert password not in line, line
    assert line.count(REDACTED) == 5, line
    assert "statsuser:" in line and "keys:" in line and "cache.internal" in line, line


def test_a_redis_url_without_a_password_adds_no_secret() -> None:
    config = load_config_text(
        MINIMAL_CONFIG + "server:\n  stats: {redis_url: 'redis://someone@127.0.0.1:6379/0'}\n")
    assert secret_values(config, {}) == []
