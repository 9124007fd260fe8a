# Stand-in for rabbitmq:3.10-management: Debian bookworm's rabbitmq-server (3.10) with the
# management plugin enabled, an entrypoint that takes RABBITMQ_DEFAULT_USER/PASS/VHOST, data in
# /var/lib/rabbitmq (node name rabbit@<hostname>, as the official image), logs on stdout and
# rabbitmqctl / rabbitmq-diagnostics on the PATH. Built by scripts/images.sh.
ARG BASE=jobrelay-stand-in/rabbitmq-base:bookworm
FROM ${BASE}
LABEL org.jobrelay.stand-in="rabbitmq:3.10-management from Debian bookworm packages (scripts/images.sh)"
# HOME: the CLI tools (also when run as root by `docker exec`) read the server's Erlang cookie.
ENV PATH=/usr/lib/rabbitmq/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    HOME=/var/lib/rabbitmq \
    RABBITMQ_DATA_DIR=/var/lib/rabbitmq \
    RABBITMQ_MNESIA_BASE=/var/lib/rabbitmq/mnesia \
    RABBITMQ_LOGS=-
COPY rabbitmq-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
RUN chmod 755 /usr/local/bin/docker-entrypoint.sh \
    && mkdir -p /etc/rabbitmq/conf.d /var/lib/rabbitmq /var/log/rabbitmq \
    && printf '%s\n' \
        'loopback_users.guest = false' \
        'listeners.tcp.default = 5672' \
        'management.tcp.port = 15672' \
        > /etc/rabbitmq/conf.d/10-defaults.conf \
    && rabbitmq-plugins enable --offline rabbitmq_management \
    && rm -f /var/lib/rabbitmq/.erlang.cookie \
    && chown -R rabbitmq:rabbitmq /etc/rabbitmq /var/lib/rabbitmq /var/log/rabbitmq \
    && chmod 1777 /var/lib/rabbitmq
VOLUME /var/lib/rabbitmq
ENTRYPOINT ["docker-entrypoint.sh"]
EXPOSE 4369 5671 5672 15672 25672
CMD ["rabbitmq-server"]
