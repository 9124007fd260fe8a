#!/usr/bin/env bash
# Entrypoint of the Patroni image (patroni.Dockerfile; compose.yaml profile `ha`).
#
# `patroni` (the default command): writes /etc/patroni/patroni.yml from the environment and runs
# Patroni as the postgres user. The first node to take the leader key in etcd runs initdb, and
# then patroni-post-bootstrap.sh creates the application's user and database; the others copy it
# (pg_basebackup) and follow it, one of them as the synchronous standby.
#   PATRONI_NAME                        this node's name, unique in the cluster (required)
#   PATRONI_SCOPE                       the cluster's name in etcd (jobrelay)
#   PATRONI_ETCD3_HOSTS                 etcd's client address(es), host:port[,host:port] (etcd:2379)
#   PATRONI_RESTAPI_CONNECT_ADDRESS     where the other nodes reach the REST API ($PATRONI_NAME:8008)
#   PATRONI_POSTGRESQL_CONNECT_ADDRESS  where the others reach PostgreSQL ($PATRONI_NAME:5432)
#   PATRONI_SUPERUSER_PASSWORD          the `postgres` superuser's (required)
#   PATRONI_REPLICATION_PASSWORD        the `replicator` replication user's (required)
#   PATRONI_SYNCHRONOUS_MODE            true: a commit returns once a standby has it (true)
#   PATRONI_TTL, PATRONI_LOOP_WAIT      the leader key's lifetime and Patroni's loop, seconds (20, 2)
#   POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB   the application's role and database, made at
#                                       bootstrap, as the official postgres image does (required)
#   PGDATA                              the data directory (/var/lib/postgresql/data)
# Any other command (`etcd ...`, `patronictl ...`, a shell) runs as given.
set -Eeuo pipefail

CONFIG=/etc/patroni/patroni.yml

fail() {
    echo "patroni-entrypoint: $*" >&2
    exit 1
}

if [ "${1:-}" != patroni ]; then
    exec "$@"
fi

for name in PATRONI_NAME PATRONI_SUPERUSER_PASSWORD PATRONI_REPLICATION_PASSWORD \
    POSTGRES_USER POSTGRES_PASSWORD POSTGRES_DB; do
    [ -n "${!name:-}" ] || fail "$name is not set (compose.yaml's ha profile: see .env.example)"
done

if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA" /var/run/postgresql /etc/patroni
    chown postgres:postgres "$PGDATA" /var/run/postgresql /etc/patroni
    chmod 700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "${BASH_SOURCE[0]}" "$@"
fi

# JSON is YAML: Python writes it, so no password needs quoting here. Mode 600: it holds them.
umask 077
python3 - "$CONFIG" <<'PYTHON'
import json
import os
import sys

env = os.environ
name = env["PATRONI_NAME"]
ttl = int(env.get("PATRONI_TTL", "20"))
loop_wait = int(env.get("PATRONI_LOOP_WAIT", "2"))
config = {
    "scope": env.get("PATRONI_SCOPE", "jobrelay"),
    "name": name,
    "restapi": {
        "listen": "0.0.0.0:8008",
        "connect_address": env.get("PATRONI_RESTAPI_CONNECT_ADDRESS", f"{name}:8008"),
    },
    "etcd3": {"hosts": env.get("PATRONI_ETCD3_HOSTS", "etcd:2379")},
    "bootstrap": {
        # The cluster-wide settings, written to etcd by the node that bootstraps.
        "dcs": {
            "ttl": ttl,
            "loop_wait": loop_wait,
            # Patroni's rule: loop_wait + 2 * retry_timeout <= ttl.
            "retry_timeout": max(1, (ttl - loop_wait) // 2),
            "synchronous_mode": env.get("PATRONI_SYNCHRONOUS_MODE", "true").lower() == "true",
            # Not strict: with its standby gone the primary keeps accepting writes alone (a
            # failover only ever promotes the synchronous standby, so nothing committed is lost).
            "synchronous_mode_strict": False,
            "postgresql": {
                "use_pg_rewind": True,  # a former primary rejoins as a standby by itself
                "use_slots": True,
                "parameters": {
                    "max_connections": 200,
                    "wal_level": "replica",
                    "hot_standby": "on",
                    "max_wal_senders": 10,
                    "max_replication_slots": 10,
                    "wal_keep_size": "256MB",
                },
            },
        },
        "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}, "data-checksums"],
        "post_bootstrap": "/usr/local/bin/patroni-post-bootstrap.sh",
    },
    "postgresql": {
        "listen": "0.0.0.0:5432",
        "connect_address": env.get("PATRONI_POSTGRESQL_CONNECT_ADDRESS", f"{name}:5432"),
        "data_dir": env["PGDATA"],
        "bin_dir": f"/usr/lib/postgresql/{env.get('PG_MAJOR', '15')}/bin",
        "pgpass": "/tmp/pgpass",
        # A new standby copies the primary at once, not after a spread checkpoint (minutes).
        "basebackup": [{"checkpoint": "fast"}],
        "authentication": {
            "superuser": {"username": "postgres", "password": env["PATRONI_SUPERUSER_PASSWORD"]},
            "replication": {
                "username": "replicator",
                "password": env["PATRONI_REPLICATION_PASSWORD"],
            },
        },
        "pg_hba": [
            "local all all trust",
            "host replication replicator all scram-sha-256",
            "host all all all scram-sha-256",
        ],
        "parameters": {
            "unix_socket_directories": "/var/run/postgresql",
            "password_encryption": "scram-sha-256",
        },
    },
}
with open(sys.argv[1], "w", encoding="utf-8") as out:
    json.dump(config, out, indent=2)
PYTHON

# patroni.yml holds the settings; the variables would otherwise reach every postgres process
# too (Patroni also reads PATRONI_* itself, with the same values).
unset PATRONI_SUPERUSER_PASSWORD PATRONI_REPLICATION_PASSWORD
exec patroni "$CONFIG"
