# syntax=docker/dockerfile:1
#
# The baton image, for those who build with Docker:
#
#   docker build -t baton:dev .
#
# Without a Docker daemon, `make image` builds the same image (tools/image).
# Both run tools/image/rootfs.sh, the one place the build flags (static,
# CGO_ENABLED=0, -trimpath, fixed -ldflags and tags) and the non-root user
# are written; tools/image's tests check that this file runs it and that
# USER, ENV, WORKDIR and ENTRYPOINT below match the image `make image` writes.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETARCH
WORKDIR /src
COPY . .
RUN GOARCH=$TARGETARCH sh tools/image/rootfs.sh /rootfs

FROM scratch
COPY --from=build /rootfs/ /
LABEL org.opencontainers.image.source="https://github.com/baton-go/baton" \
      org.opencontainers.image.title="baton"
ENV PATH=/usr/local/bin
USER 65532:65532
WORKDIR /home/nonroot
ENTRYPOINT ["/usr/local/bin/baton"]
