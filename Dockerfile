# buzz-backfilld in a container: the Debian packages built in the first stage, installed in a
# Debian 12 slim runtime that runs as a non-root user, with the image's own configuration
# (packaging/container/buzz-backfilld.conf: it listens on the port it exposes). docs/container.md
#
#   docker build -t buzz-backfilld .
#   docker run --rm -p 127.0.0.1:9464:9464 -e BUZZ_BACKFILL_DATABASE_URL=postgresql://... \
#       buzz-backfilld
#
# The relay's definitions: a derived image (FROM buzz-backfilld, COPY the module into
# /usr/lib/buzz-backfill and *.def files into /etc/buzz-backfill/definitions.d) or a mounted
# directory of regular files; docs/container.md shows both.

# ---- build: the same scripts CI uses ------------------------------------------------------
FROM debian:12 AS build
WORKDIR /src
COPY scripts/deps.sh scripts/deps.sh
RUN apt-get update && scripts/deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN rm -rf build-pkg && scripts/package.sh --no-lintian

# ---- runtime ------------------------------------------------------------------------------
FROM debian:12-slim
COPY --from=build /src/build-pkg/*.deb /tmp/pkg/
COPY packaging/container/buzz-backfilld.conf /tmp/pkg/container.conf
# the packages' dependencies come from Debian; the buzz-backfill user is made here with a fixed
# ID (999) before the packages' postinst, which keeps an existing one, so that Kubernetes'
# runAsNonRoot can check the numeric USER below
RUN groupadd --system --gid 999 buzz-backfill \
    && useradd --system --uid 999 --gid 999 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin buzz-backfill \
    && apt-get update \
    && apt-get install -y --no-install-recommends /tmp/pkg/buzz-backfilld_*.deb \
       /tmp/pkg/buzzctl_*.deb /tmp/pkg/libbuzz-backfill1_*.deb \
    && install -m 0640 -o root -g buzz-backfill /tmp/pkg/container.conf \
       /etc/buzz-backfill/buzz-backfilld.conf \
    && rm -rf /var/lib/apt/lists/* /tmp/pkg \
    && install -d -o buzz-backfill -g buzz-backfill -m 0750 /run/buzz-backfill
USER 999:999
ENV BUZZ_BACKFILL_CONFIG=/etc/buzz-backfill/buzz-backfilld.conf
# 9464: http_listen (/metrics, /livez, /readyz), which the image's configuration serves on
# 0.0.0.0. The Admin and Readiness APIs for other pods (tls+tcp://0.0.0.0:7401 with tokens) need
# a certificate and trusted keys first: configure them, then publish 7401 (docs/container.md).
EXPOSE 9464
ENTRYPOINT ["/usr/sbin/buzz-backfilld"]
CMD ["run"]
