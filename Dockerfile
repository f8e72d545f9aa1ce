# syntax=docker/dockerfile:1
#
# kube2nats container image: a static (musl) release build on distroless/static, no shell, no
# package manager, running as UID 65532, fine with a read-only root filesystem.
#   docker build -t ghcr.io/kube2nats/kube2nats:0.1.0 .
# scripts/check-deploy builds the binary with the same cargo command (it checks that this file
# still contains it) and reports its size: the image is that plus about 2 MB of distroless/static.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-slim-bookworm AS build
# ring compiles C and assembly for the target: it needs a musl C compiler.
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools=1.2.3-1 \
 && rm -rf /var/lib/apt/lists/* \
 && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
# The cargo caches are build-time mounts; the binary is copied out of them.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --target x86_64-unknown-linux-musl --bin kube2nats \
 && cp target/x86_64-unknown-linux-musl/release/kube2nats /kube2nats

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="kube2nats" \
      org.opencontainers.image.description="Turns the Kubernetes watch API into NATS messages" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/kube2nats/kube2nats" \
      org.opencontainers.image.base.name="gcr.io/distroless/static-debian12:nonroot"
COPY --from=build /kube2nats /usr/local/bin/kube2nats
# distroless' nonroot user, numerically, so runAsNonRoot can verify it without /etc/passwd.
USER 65532:65532
# /metrics, /healthz and /readyz (http.listen).
EXPOSE 9090
ENTRYPOINT ["/usr/local/bin/kube2nats"]
CMD ["--config", "/etc/kube2nats/kube2nats.toml"]
