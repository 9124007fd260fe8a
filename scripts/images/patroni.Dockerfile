# The image of compose.yaml's `ha` profile: PostgreSQL 15 under Patroni 3.0 (command `patroni`,
# the entrypoint writes patroni.yml from the environment: patroni-entrypoint.sh), and etcd 3.4 for
# Patroni's consensus (command `etcd ...`, any other command runs as given).
#
# Two ways to build it from this one file:
# - where a registry answers, compose builds it FROM the official postgres:15 (Debian bookworm
#   based), and the RUN below installs Debian's patroni, etcd-server and etcd-client with apt-get
#   (the image's PGDG repository may offer a newer patroni: pin it if 3.0 matters). That path is
#   written for sites with a registry and is not exercised on the machines without one.
# - where none answers, scripts/images.sh builds it with BASE set to a Debian bookworm root
#   filesystem (mmdebstrap) that has postgresql-15, patroni, etcd-server and etcd-client already:
#   the RUN then installs nothing.
ARG BASE=postgres:15
FROM ${BASE}
LABEL org.jobrelay.image="PostgreSQL 15 under Patroni, and etcd (compose.yaml profile ha)"
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    PG_MAJOR=15 \
    PGDATA=/var/lib/postgresql/data
RUN if ! command -v patroni >/dev/null || ! command -v etcd >/dev/null \
        || ! command -v etcdctl >/dev/null; then \
        apt-get update \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            patroni etcd-server etcd-client \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && mkdir -p /var/run/postgresql "$PGDATA" /var/lib/etcd /etc/patroni \
    && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql /etc/patroni \
    && chown etcd /var/lib/etcd \
    && chmod 700 /var/lib/etcd
COPY patroni-entrypoint.sh /usr/local/bin/patroni-entrypoint.sh
COPY patroni-post-bootstrap.sh /usr/local/bin/patroni-post-bootstrap.sh
RUN chmod 755 /usr/local/bin/patroni-entrypoint.sh /usr/local/bin/patroni-post-bootstrap.sh
VOLUME /var/lib/postgresql/data
ENTRYPOINT ["patroni-entrypoint.sh"]
# Patroni stops PostgreSQL (fast) and hands the leader key over on SIGTERM; the official
# postgres image's SIGINT is for a bare server.
STOPSIGNAL SIGTERM
# 5432 PostgreSQL, 8008 Patroni's REST API; 2379 etcd's clients.
EXPOSE 5432 8008 2379
CMD ["patroni"]
