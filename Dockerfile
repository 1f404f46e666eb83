# MicroView image: microview-agent, microview-collector, microviewctl and libmicroview.
# Build: docker build -t microview:dev .
FROM debian:12 AS build
WORKDIR /src
COPY scripts/deps.sh scripts/deps.sh
RUN ./scripts/deps.sh build
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMV_BUILD_TESTS=OFF -DMV_WERROR=ON \
 && cmake --build /build -j"$(nproc)" \
 && DESTDIR=/out cmake --install /build --prefix /usr

FROM debian:12-slim
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      libgrpc29 libprotobuf-c1 libmicrohttpd12 zlib1g libjson-c5 libyaml-0-2 libcurl4 \
      libibverbs1 librdmacm1 ibverbs-providers ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/usr /usr
USER 0
ENTRYPOINT ["/usr/bin/microview-agent"]
