#!/usr/bin/env bash
# Patroni's post_bootstrap (patroni-entrypoint.sh): runs once, on the node that ran initdb, with
# a superuser connection string as its argument. Creates the application's role and database
# (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB), as the official postgres image does.
set -Eeuo pipefail

psql "$1" -v ON_ERROR_STOP=1 --no-psqlrc \
    -v user="$POSTGRES_USER" -v password="$POSTGRES_PASSWORD" -v db="$POSTGRES_DB" <<'SQL'
CREATE ROLE :"user" LOGIN PASSWORD :'password';
CREATE DATABASE :"db" OWNER :"user";
SQL
echo "patroni-post-bootstrap: role and database $POSTGRES_DB created"
