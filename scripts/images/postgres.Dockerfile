# Stand-in for postgres:15: Debian bookworm's postgresql-15 with an entrypoint that takes the
# official image's environment (POSTGRES_USER/PASSWORD/DB, PGDATA, /docker-entrypoint-initdb.d)
# and runs the server as the postgres user, listening on TCP. Built by scripts/images.sh.
ARG BASE=jobrelay-stand-in/postgres-base:bookworm
FROM ${BASE}
LABEL org.jobrelay.stand-in="postgres:15 from Debian bookworm packages (scripts/images.sh)"
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    PG_MAJOR=15 \
    PGDATA=/var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
RUN chmod 755 /usr/local/bin/docker-entrypoint.sh \
    && mkdir -p /docker-entrypoint-initdb.d /var/run/postgresql "$PGDATA" \
    && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql \
    && chmod 3777 /var/run/postgresql \
    && chmod 1777 "$PGDATA"
VOLUME /var/lib/postgresql/data
ENTRYPOINT ["docker-entrypoint.sh"]
# Fast shutdown (SIGTERM would wait for every client to disconnect), as the official image.
STOPSIGNAL SIGINT
EXPOSE 5432
CMD ["postgres"]
