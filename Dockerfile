# kubescribe: `kubescribe run` on Python 3.11 / Debian bookworm, with exactly the dependencies
# locked in uv.lock. Runs as uid 65532 with a read-only root file system (mount an emptyDir at
# /tmp for the Git object cache).
#
#   docker build -t kubescribe:dev .                      # or: podman / buildah bud
#   BASE: any Debian bookworm image with python3 3.11, its venv module and libstdc++6 (google-re2)
#   (hack/build-image.sh builds on a base made locally with mmdebstrap: --build-arg BASE=...)
ARG BASE=python:3.11-slim-bookworm
ARG VERSION=0.1.0
ARG SOURCE=""

FROM ${BASE} AS build
ARG UV_VERSION=0.13.9
ENV UV_COMPILE_BYTECODE=1 \
    UV_SYSTEM_CERTS=1 \
    UV_LINK_MODE=copy \
    UV_NO_CACHE=1 \
    UV_PYTHON=python3 \
    UV_PYTHON_DOWNLOADS=never \
    UV_PROJECT_ENVIRONMENT=/opt/kubescribe \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
RUN python3 -m venv /opt/uv && /opt/uv/bin/pip install --quiet "uv==${UV_VERSION}"
WORKDIR /src
# Dependencies first (their layer survives source changes), then the project itself.
COPY pyproject.toml uv.lock ./
RUN /opt/uv/bin/uv sync --frozen --no-dev --no-install-project --quiet
COPY README.md ./
COPY src ./src
RUN /opt/uv/bin/uv sync --frozen --no-dev --no-editable --quiet \
    && /opt/kubescribe/bin/kubescribe version \
    && mkdir -p /opt/kubescribe/share/kubescribe \
    && /opt/uv/bin/uv export --frozen --no-dev --format cyclonedx1.5 \
        --preview-features sbom-export -o /opt/kubescribe/share/kubescribe/sbom.cdx.json --quiet

FROM ${BASE}
ARG VERSION
ARG SOURCE
LABEL org.opencontainers.image.title="kubescribe" \
      org.opencontainers.image.description="Mirror the Kubernetes API into a Git repository (reverse GitOps)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="${SOURCE}" \
      io.kubescribe.sbom="/opt/kubescribe/share/kubescribe/sbom.cdx.json"
COPY --from=build /opt/kubescribe /opt/kubescribe
ENV PATH=/opt/kubescribe/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/nonexistent \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MALLOC_ARENA_MAX=2
USER 65532:65532
# HOME is no writable folder (and not the cache at /tmp): nothing a fetched tree could plant
# there is read. The current folder is not writable either.
WORKDIR /
EXPOSE 8080
ENTRYPOINT ["kubescribe", "run"]
