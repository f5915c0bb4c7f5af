# The convoy-scheduler image: a release build on Debian 12 (bookworm), copied
# into distroless's cc image of the same Debian release (glibc, libgcc, CA
# certificates, no shell, no package manager), run as its `nonroot` user
# (65532:65532), as the Helm chart's securityContext requires.
#
#   docker build -t registry.example/convoy-scheduler:0.2.0 \
#     --build-arg CONVOY_GIT_COMMIT=$(git rev-parse --short=12 HEAD) .
#
# The build context has no .git (.dockerignore), so the commit that
# `convoy-scheduler --version` and `convoy_build_info` report comes from the
# CONVOY_GIT_COMMIT build argument; without it they say `unknown`.
#
# The binary is dynamically linked against glibc (mimalloc is the allocator);
# builder and base share Debian 12, so the glibc versions match.
# docs/operating.md says how the image's runtime conditions are tested without
# a container engine.

# The build stage runs on the builder's own platform and cross-compiles for
# the image's (`docker buildx build --platform linux/amd64,linux/arm64`), so
# an arm64 image is not compiled under emulation. A plain `docker build`
# builds for the builder's platform.
FROM --platform=$BUILDPLATFORM rust:1.95-bookworm AS build
ARG BUILDARCH
ARG TARGETARCH
WORKDIR /src
RUN set -eu; \
    if [ -z "${TARGETARCH:-}" ] || [ "${TARGETARCH:-}" = "${BUILDARCH:-}" ]; then \
      echo "" > /rust-target; \
    else \
      case "${TARGETARCH}" in \
        amd64) triple=x86_64-unknown-linux-gnu; gnu=x86_64-linux-gnu; pkgs="gcc-x86-64-linux-gnu libc6-dev-amd64-cross" ;; \
        arm64) triple=aarch64-unknown-linux-gnu; gnu=aarch64-linux-gnu; pkgs="gcc-aarch64-linux-gnu libc6-dev-arm64-cross" ;; \
        *) echo "unsupported TARGETARCH ${TARGETARCH}" >&2; exit 1 ;; \
      esac; \
      apt-get update; \
      apt-get install -y --no-install-recommends $pkgs; \
      rm -rf /var/lib/apt/lists/*; \
      rustup target add "$triple"; \
      echo "$triple" > /rust-target; \
      upper=$(echo "$triple" | tr 'a-z-' 'A-Z_'); lower=$(echo "$triple" | tr '-' '_'); \
      { echo "export CARGO_TARGET_${upper}_LINKER=${gnu}-gcc"; \
        echo "export CC_${lower}=${gnu}-gcc"; \
        echo "export AR_${lower}=${gnu}-ar"; } > /cross-env; \
    fi; \
    touch /cross-env
ARG CONVOY_GIT_COMMIT=""
ENV CONVOY_GIT_COMMIT=${CONVOY_GIT_COMMIT}
COPY . .
RUN set -eu; \
    . /cross-env; \
    triple=$(cat /rust-target); \
    if [ -n "$triple" ]; then \
      cargo build --release --locked -p convoy-scheduler --bin convoy-scheduler --target "$triple"; \
      cp "target/$triple/release/convoy-scheduler" /convoy-scheduler; \
    else \
      cargo build --release --locked -p convoy-scheduler --bin convoy-scheduler; \
      cp target/release/convoy-scheduler /convoy-scheduler; \
    fi

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /convoy-scheduler /usr/local/bin/convoy-scheduler
USER 65532:65532
EXPOSE 10251
ENTRYPOINT ["/usr/local/bin/convoy-scheduler"]
