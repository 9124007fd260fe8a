#!/usr/bin/env bash
# Entrypoint of the postgres:15 stand-in (scripts/images.sh): the official image's contract.
#   POSTGRES_PASSWORD (required unless POSTGRES_HOST_AUTH_METHOD=trust), POSTGRES_USER (postgres),
#   POSTGRES_DB ($POSTGRES_USER), POSTGRES_INITDB_ARGS, POSTGRES_HOST_AUTH_METHOD (scram-sha-256),
#   each also as <NAME>_FILE; PGDATA; /docker-entrypoint-initdb.d/*.sh|*.sql|*.sql.gz|*.sql.xz
#   run once, on a server reachable only through its Unix socket. Then the server runs as the
#   postgres user and listens on every interface (TCP 5432).
set -Eeo pipefail

file_env() {
    local var="$1" default="${2:-}" file_var="${1}_FILE"
    if [ -n "${!var:-}" ] && [ -n "${!file_var:-}" ]; then
        echo "error: both $var and $file_var are set (they are exclusive)" >&2
        exit 1
    fi
    local value="$default"
    if [ -n "${!var:-}" ]; then
        value="${!var}"
    elif [ -n "${!file_var:-}" ]; then
        value="$(<"${!file_var}")"
    fi
    export "$var"="$value"
    unset "$file_var"
}

if [ "${1:0:1}" = '-' ]; then
    set -- postgres "$@"
fi

if [ "$1" = 'postgres' ] && [ "$(id -u)" = '0' ]; then
    mkdir -p "$PGDATA" /var/run/postgresql
    find "$PGDATA" \! -user postgres -exec chown postgres:postgres '{}' +
    chmod 700 "$PGDATA"
    chown postgres:postgres /var/run/postgresql
    chmod 3777 /var/run/postgresql
    exec setpriv --reuid=postgres --regid=postgres --init-groups "${BASH_SOURCE[0]}" "$@"
fi

run_init_files() {
    local psql=(psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc
        --dbname "$POSTGRES_DB")
    local f
    for f in /docker-entrypoint-initdb.d/*; do
        case "$f" in
            *.sh)
                if [ -x "$f" ]; then
                    echo "$0: running $f"
                    "$f"
                else
                    echo "$0: sourcing $f"
                    # shellcheck disable=SC1090
                    . "$f"
                fi
                ;;
            *.sql) echo "$0: running $f"; "${psql[@]}" -f "$f" ;;
            *.sql.gz) echo "$0: running $f"; gunzip -c "$f" | "${psql[@]}" ;;
            *.sql.xz) echo "$0: running $f"; xzcat "$f" | "${psql[@]}" ;;
            *.sql.zst) echo "$0: running $f"; zstd -dc "$f" | "${psql[@]}" ;;
            *) if [ -e "$f" ]; then echo "$0: ignoring $f"; fi ;;
        esac
    done
}

if [ "$1" = 'postgres' ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
    file_env POSTGRES_PASSWORD
    file_env POSTGRES_USER postgres
    file_env POSTGRES_DB "$POSTGRES_USER"
    file_env POSTGRES_INITDB_ARGS
    auth_method="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}"
    if [ -z "$POSTGRES_PASSWORD" ] && [ "$auth_method" != 'trust' ]; then
        echo "error: the database is uninitialized and POSTGRES_PASSWORD is not set" >&2
        echo "       (set it, or POSTGRES_HOST_AUTH_METHOD=trust to allow every connection)" >&2
        exit 1
    fi
    # shellcheck disable=SC2086
    initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
        $POSTGRES_INITDB_ARGS
    printf "\nlisten_addresses = '*'\n" >>"$PGDATA/postgresql.conf"
    printf '\nhost all all all %s\n' "$auth_method" >>"$PGDATA/pg_hba.conf"

    # Init runs on the Unix socket only: nothing over TCP sees a half-initialised server.
    pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p 5432" -w start
    if [ "$POSTGRES_DB" != 'postgres' ]; then
        psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc \
            --dbname postgres --set db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";'
    fi
    run_init_files
    pg_ctl -D "$PGDATA" -m fast -w stop
    unset PGPASSWORD
    echo "PostgreSQL init process complete; ready for start up."
fi

exec "$@"
