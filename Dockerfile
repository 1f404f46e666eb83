# MicroView image: microview-agent, microview-collector, microviewctl, microview-webhook,
# microview-scaler and libmicroview (shared + static library, header, pkg-config file) — whatever
# `cmake --install` installs, under /usr.
#
# The FROM images are made locally from Debian packages (no registry): scripts/base-image.sh.
# Build (amd64):   scripts/base-image.sh build runtime
#                  docker build -t microview/microview:0.1.0 --build-arg REVISION=$(git rev-parse HEAD) .
# Build (arm64):   scripts/base-image.sh cross-arm64 && scripts/base-image.sh --arch arm64 runtime
#                  docker build --build-arg ARCH=arm64 \
#                    --build-arg BUILD_BASE=microview-base/cross-arm64:bookworm \
#                    -t microview/microview:0.1.0-arm64 .
#
# The final stage only copies files (no RUN), so an arm64 image needs no emulation to build: the
# arm64 binaries are cross-compiled in the build stage. The default user is 65532 (nonroot,
# defined by the runtime base image); the agent runs as root, see docs/image.md.

ARG ARCH=amd64
ARG SUITE=bookworm
ARG BUILD_BASE=microview-base/build:${SUITE}-amd64
ARG RUNTIME_BASE=microview-base/runtime:${SUITE}-${ARCH}

FROM ${BUILD_BASE} AS build
ARG ARCH
WORKDIR /src
COPY . .
# -Werror as in CI; no tests in the image build (CI runs them, scripts/cross-arm64.sh for arm64).
# GNUInstallDirs picks Debian's multiarch libdir only when not cross-compiling: arm64 names it.
RUN set -eu; \
    case "$ARCH" in \
      amd64) tc= strip=strip ;; \
      arm64) strip=aarch64-linux-gnu-strip \
             tc="-DCMAKE_TOOLCHAIN_FILE=/src/cmake/toolchain-aarch64-linux-gnu.cmake \
                 -DCMAKE_INSTALL_LIBDIR=lib/aarch64-linux-gnu" ;; \
      *) echo "ARCH must be amd64 or arm64, got $ARCH" >&2; exit 1 ;; \
    esac; \
    cmake -S . -B /build $tc -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr \
      -DMV_BUILD_TESTS=OFF -DMV_WERROR=ON >/dev/null; \
    cmake --build /build -j"$(nproc)"; \
    DESTDIR=/out cmake --install /build >/dev/null; \
    find /out/usr -type f \( -path '*/bin/*' -o -name '*.so.*' \) -exec $strip --strip-debug {} +; \
    ls -l /out/usr/bin

FROM ${RUNTIME_BASE}
ARG VERSION=0.1.0
ARG REVISION=unknown
COPY --from=build /out/usr/ /usr/
LABEL org.opencontainers.image.title="microview" \
      org.opencontainers.image.description="MicroView: shared-memory metrics for Kubernetes pods, read by a node agent and collectors (shm or RDMA) and served as Prometheus/OpenMetrics" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.vendor="MicroView" \
      org.opencontainers.image.documentation="docs/image.md"
# The collector's HTTP port (/metrics); the agent's TCP control plane is off unless configured.
EXPOSE 9469
# Collector, webhook and scaler run as this user; the agent's chart sets runAsUser 0 (docs/image.md).
USER 65532:65532
CMD ["/usr/bin/microview-collector"]
