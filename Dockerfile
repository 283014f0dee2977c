# buzz-backfilld in a container: the Debian packages built in the first stage, installed in a
# Debian 12 slim runtime that runs as a non-root user. docs/install.md#containers-and-kubernetes
#
#   docker build -t buzz-backfilld .
#   docker run --rm -e BUZZ_BACKFILL_DATABASE_URL=postgresql://... buzz-backfilld

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
# the packages' dependencies come from Debian; the buzz-backfill user is made here with a fixed
# ID (999) before the packages' postinst, which keeps an existing one, so that Kubernetes'
# runAsNonRoot can check the numeric USER below
RUN groupadd --system --gid 999 buzz-backfill \
    && useradd --system --uid 999 --gid 999 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin buzz-backfill \
    && apt-get update \
    && apt-get install -y --no-install-recommends /tmp/pkg/buzz-backfilld_*.deb \
       /tmp/pkg/buzzctl_*.deb /tmp/pkg/libbuzz-backfill1_*.deb \
    && rm -rf /var/lib/apt/lists/* /tmp/pkg \
    && install -d -o buzz-backfill -g buzz-backfill -m 0750 /run/buzz-backfill
USER 999:999
ENV BUZZ_BACKFILL_CONFIG=/etc/buzz-backfill/buzz-backfilld.conf
# admin/readiness over tcp for other pods (tokens required there); the ipc socket stays local;
# 9464: http_listen (/metrics, /livez, /readyz) when configured
EXPOSE 7401 9464
ENTRYPOINT ["/usr/sbin/buzz-backfilld"]
CMD ["run"]
