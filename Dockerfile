# The convoy-scheduler image: a release build on Debian 12 (bookworm), copied
# into distroless's cc image of the same Debian release (glibc, libgcc, CA
# certificates, no shell, no package manager), run as its `nonroot` user
# (65532:65532), as the Helm chart's securityContext requires.
#
#   docker build -t registry.example/convoy-scheduler:0.1.0 .
#
# The binary is dynamically linked against glibc (mimalloc is the allocator);
# builder and base share Debian 12, so the glibc versions match.
# docs/operating.md says how the image's runtime conditions are tested without
# a container engine.

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p convoy-scheduler --bin convoy-scheduler \
 && cp target/release/convoy-scheduler /convoy-scheduler

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /convoy-scheduler /usr/local/bin/convoy-scheduler
USER 65532:65532
EXPOSE 10251
ENTRYPOINT ["/usr/local/bin/convoy-scheduler"]
