# jobrelay: one image for every service (api, dispatcher, consumer, migrate).
#
#   docker build -t jobrelay:latest .                  (compose.yaml does this: `--build`)
#   docker build --build-arg PYTHON_IMAGE=registry.example/python:3.11-slim .
#
# The locked dependencies (requirements/runtime.txt, with hashes) are installed in a layer of
# their own, built only from the lock and wheels/: a change of jobrelay's code reinstalls
# nothing. When wheels/ holds wheels (scripts/images.sh downloads them on the host), they are
# installed without any index; else pip fetches the locked versions from the index.
# Classic builder syntax only (no BuildKit features), so any Docker Engine 20.10+ builds it.
ARG PYTHON_IMAGE=python:3.11-slim

# --- the locked dependencies, in a virtual environment -----------------------------------------
FROM ${PYTHON_IMAGE} AS dependencies
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
# A venv: works on an "externally managed" distribution Python too.
RUN python3 -m venv /opt/jobrelay
COPY requirements/runtime.txt /build/requirements/runtime.txt
COPY wheels/ /build/wheels/
RUN set -e; \
    if ls /build/wheels/*.whl >/dev/null 2>&1; then \
        echo "installing the locked dependencies from wheels/ (no index)"; \
        source="--no-index --find-links /build/wheels"; \
    else \
        echo "installing the locked dependencies from the package index"; \
        source=""; \
    fi; \
    /opt/jobrelay/bin/pip install --require-hashes --only-binary=:all: $source \
        -r /build/requirements/runtime.txt

# --- the image ---------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/jobrelay \
    PATH=/opt/jobrelay/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

RUN useradd --create-home --uid 10001 --user-group --shell /usr/sbin/nologin jobrelay \
    && mkdir -p /data/results \
    && chown jobrelay:jobrelay /data/results

# The dependencies' layer: the same as long as the lock (and wheels/) are.
COPY --from=dependencies /opt/jobrelay /opt/jobrelay

# jobrelay itself, against the locked setuptools already in the venv.
COPY pyproject.toml README.md /build/src/
COPY services /build/src/services
RUN pip install --no-deps --no-build-isolation --no-index /build/src \
    && rm -rf /build \
    && jobrelay --help >/dev/null

WORKDIR /home/jobrelay
USER jobrelay
ENV JOBRELAY_API_HOST=0.0.0.0 \
    JOBRELAY_RESULTS_DIR=/data/results
EXPOSE 8000 9100
CMD ["jobrelay", "api"]
