# syntax=docker/dockerfile:1
# slorouter: multi-stage build, non-root runtime, config mounted at /etc/slorouter.
FROM python:3.11-slim AS build
WORKDIR /src
# The runtime pins only (requirements.lock less the test and lint tools).
COPY requirements-runtime.lock pyproject.toml README.md LICENSE ./
RUN python -m venv /opt/venv && /opt/venv/bin/pip install --no-cache-dir -r requirements-runtime.lock
COPY router ./router
COPY policies ./policies
COPY cache ./cache
COPY evals ./evals
RUN /opt/venv/bin/pip install --no-cache-dir --no-deps .

FROM python:3.11-slim
RUN useradd --system --uid 10001 --home /var/lib/slorouter --create-home slorouter
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True
# Numeric, so that Kubernetes' runAsNonRoot can verify it without a runAsUser of its own.
USER 10001
WORKDIR /var/lib/slorouter
VOLUME ["/etc/slorouter", "/var/lib/slorouter"]
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=2s --start-period=20s --retries=3 \
  CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2).status == 200 else 1)"
# The mounted config must define api_keys: without keys slorouter refuses to bind beyond loopback.
CMD ["slorouter", "serve", "--config", "/etc/slorouter/config.yaml", "--host", "0.0.0.0", "--port", "8080"]
