#!/usr/bin/env bash
# Entrypoint of the rabbitmq:3.10-management stand-in (scripts/images.sh).
#   RABBITMQ_DEFAULT_USER / RABBITMQ_DEFAULT_PASS / RABBITMQ_DEFAULT_VHOST (guest / guest / "/")
#   create that user and vhost on first start, as the official image does; RABBITMQ_NODE_PORT
#   moves the AMQP listener. The node is rabbit@<hostname> with its data under
#   /var/lib/rabbitmq: give the container a fixed hostname to keep its data across recreation.
#   The server runs as the rabbitmq user.
set -Eeo pipefail

if [ "$1" = 'rabbitmq-server' ] && [ "$(id -u)" = '0' ]; then
    mkdir -p /var/lib/rabbitmq /etc/rabbitmq/conf.d
    find /var/lib/rabbitmq \! -user rabbitmq -exec chown rabbitmq:rabbitmq '{}' +
    # The CLI tools and the server share this cookie; create it before anything else can.
    cookie=/var/lib/rabbitmq/.erlang.cookie
    if [ ! -s "$cookie" ]; then
        (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$cookie")
    fi
    chown rabbitmq:rabbitmq "$cookie"
    chmod 600 "$cookie"

    # The default user's settings, as the official image takes them (the file is readable by
    # the rabbitmq user only).
    defaults=/etc/rabbitmq/conf.d/20-default-user.conf
    : >"$defaults"
    chmod 600 "$defaults"
    chown rabbitmq:rabbitmq "$defaults"
    for name in USER PASS VHOST; do
        var="RABBITMQ_DEFAULT_$name"
        value="${!var:-}"
        if [ -n "$value" ]; then
            case "$value" in
                *$'\n'*)
                    echo "error: $var must be one line" >&2
                    exit 1
                    ;;
            esac
            key="default_$(tr '[:upper:]' '[:lower:]' <<<"$name")"
            printf '%s = %s\n' "$key" "$value" >>"$defaults"
        fi
    done
    if [ -n "${RABBITMQ_NODE_PORT:-}" ]; then
        printf 'listeners.tcp.default = %s\n' "$RABBITMQ_NODE_PORT" >>"$defaults"
    fi
    exec setpriv --reuid=rabbitmq --regid=rabbitmq --init-groups "${BASH_SOURCE[0]}" "$@"
fi

exec "$@"
