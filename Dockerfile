# kubescribe: `kubescribe run` on Python 3.11 / Debian bookworm, with exactly the dependencies
# locked in uv.lock. The final image holds only what the operator needs (the interpreter, the
# standard library without tests or UIs, the environment, the shared libraries they link, the
# CA bundle): no shell, no package manager, no pip. Runs as uid 65532 with a read-only root file
# system (mount an emptyDir at /tmp for the Git object cache).
#
#   docker build -t kubescribe:dev .                      # or: podman / buildah bud
#   docker buildx build --platform linux/arm64 .          # cross: no step runs under emulation
#
# BASE: any Debian bookworm image with python3 3.11, its venv module and ca-certificates (the
# build stages run on it, on the build machine's platform). RUNTIME: where the target
# platform's interpreter and libraries are taken from, by default BASE for the target platform
# (python3 3.11 and libstdc++6, same layout as BASE). hack/build-image.sh builds on a base made
# locally with mmdebstrap, and for arm64 on a runtime root made by `mmdebstrap --variant=extract`.
# KUSTOMIZE=true adds hack/image/bin/linux-<arch>/kustomize (docs/kustomize.md).
ARG BASE=python:3.11-slim-bookworm
ARG RUNTIME=${BASE}
ARG VERSION=0.1.0
ARG SOURCE=""

FROM --platform=${BUILDPLATFORM} ${BASE} AS build
ARG TARGETARCH
ARG BUILDARCH
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
# Wheels for the target platform (bookworm's glibc 2.36), installed on the build platform.
# Dependencies first (their layer survives source changes), then the project itself.
COPY pyproject.toml uv.lock ./
RUN case "${TARGETARCH:-amd64}" in \
      amd64) platform=x86_64-manylinux_2_36 ;; \
      arm64) platform=aarch64-manylinux_2_36 ;; \
      *) echo "unsupported target architecture: ${TARGETARCH}" >&2; exit 1 ;; \
    esac \
    && echo "$platform" > /src/python-platform \
    && /opt/uv/bin/uv sync --frozen --no-dev --no-install-project --python-platform "$platform" --quiet
COPY README.md ./
COPY src ./src
RUN /opt/uv/bin/uv sync --frozen --no-dev --no-editable --python-platform "$(cat /src/python-platform)" --quiet \
    && if [ "${TARGETARCH:-amd64}" = "${BUILDARCH:-amd64}" ]; then /opt/kubescribe/bin/kubescribe version; fi \
    && mkdir -p /opt/kubescribe/share/kubescribe \
    && /opt/uv/bin/uv export --frozen --no-dev --format cyclonedx1.5 \
        --preview-features sbom-export -o /opt/kubescribe/share/kubescribe/sbom.cdx.json --quiet

# The target platform's Debian files (read as data by the prune stage, never run). The explicit
# platform is the default, but buildah 1.28 otherwise keeps the build platform of the stage above.
# hadolint ignore=DL3065
FROM --platform=${TARGETPLATFORM} ${RUNTIME} AS runtime

# On the build platform, like the build stage; what changes less often first (the runtime
# root's copy survives source changes).
FROM --platform=${BUILDPLATFORM} ${BASE} AS prune
ARG TARGETARCH
ARG KUSTOMIZE=false
COPY --from=runtime / /runtime/
COPY hack/image/ /src/hack/image/
COPY --from=build /opt/kubescribe /opt/kubescribe
RUN case "${KUSTOMIZE}" in \
      true) kustomize="--kustomize=/src/hack/image/bin/linux-${TARGETARCH:-amd64}/kustomize" ;; \
      false) kustomize="" ;; \
      *) echo "KUSTOMIZE is true or false, not '${KUSTOMIZE}'" >&2; exit 1 ;; \
    esac \
    && python3 -I /src/hack/image/prune.py --runtime /runtime --venv /opt/kubescribe \
        --out /rootfs --arch "${TARGETARCH:-amd64}" ${kustomize:+"$kustomize"}

FROM scratch
ARG VERSION
ARG SOURCE
LABEL org.opencontainers.image.title="kubescribe" \
      org.opencontainers.image.description="Mirror the Kubernetes API into a Git repository (reverse GitOps)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="${SOURCE}" \
      io.kubescribe.sbom="/opt/kubescribe/share/kubescribe/sbom.cdx.json"
COPY --from=prune /rootfs /
ENV PATH=/opt/kubescribe/bin:/usr/local/bin:/usr/bin \
    HOME=/nonexistent \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MALLOC_ARENA_MAX=2
USER 65532:65532
# HOME is no writable folder (and not the cache at /tmp): nothing a fetched tree could plant
# there is read. The current folder is not writable either.
WORKDIR /
EXPOSE 8080
ENTRYPOINT ["kubescribe", "run"]
