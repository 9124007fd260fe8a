# jobrelay: one image for every service (api, dispatcher, consumer, migrate).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY alembic ./alembic
COPY services ./services
RUN pip install . \
    && useradd --create-home --uid 10001 --shell /usr/sbin/nologin jobrelay \
    && mkdir -p /data/results \
    && chown jobrelay:jobrelay /data/results

USER jobrelay
ENV JOBRELAY_API_HOST=0.0.0.0 \
    JOBRELAY_RESULTS_DIR=/data/results
EXPOSE 8000 9100
CMD ["jobrelay", "api"]
