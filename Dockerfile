# syntax=docker/dockerfile:1.7
# Two images from one build context (see docs/images.md):
#   docker build --target operator -t ghcr.io/specdecode/specdecode-operator:0.1.0 .
#   docker build --target runtime  -t ghcr.io/specdecode/specdecode-runtime:0.1.0 .
#
# Base images are pinned by tag here; the release workflow resolves each tag to its digest and records it
# (docs/images.md, "Pinning"). To build on a digest, pass --build-arg SGLANG_IMAGE=lmsysorg/sglang@sha256:...
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm
ARG SGLANG_IMAGE=lmsysorg/sglang:v0.5.23

# ---- build: one wheel of the project, no dependencies ------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
COPY runtime ./runtime
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# ---- operator: slim Python, the `operator` extra only, non-root --------------------------------------------------
FROM ${PYTHON_IMAGE} AS operator
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN groupadd --system --gid 65532 specdecode \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin specdecode
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m pip install "$(ls /wheels/specdecode_operator-*.whl)[operator]"
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["specdecode", "operator", "run"]

# ---- runtime: the pinned SGLang CUDA image plus the `runtime` extra ----------------------------------------------
# torch and sglang come from the base image; the `runtime` extra adds only prometheus-client, aiohttp and numpy.
FROM ${SGLANG_IMAGE} AS runtime
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_BREAK_SYSTEM_PACKAGES=1
# Non-root, with the same uid the rendered pod sets (render/pod.py RUNTIME_UID): the pod's root filesystem is
# read-only and every cache lives under the /tmp emptyDir (HOME included).
RUN groupadd --system --gid 10001 specdecode \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp/home --shell /usr/sbin/nologin specdecode
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python3 -m pip install "$(ls /wheels/specdecode_operator-*.whl)[runtime]" \
 && python3 -c "import sglang, specdecode_runtime; print('sglang', sglang.__version__)"
ENV HOME=/tmp/home \
    XDG_CACHE_HOME=/tmp/cache
USER 10001:10001
ENTRYPOINT ["specdecode-runtime", "launch"]
