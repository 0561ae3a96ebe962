#!/bin/bash
# The official image's entrypoint, cut to what the test kit uses: initialise on first start
# from POSTGRES_USER (default postgres), POSTGRES_PASSWORD (required unless
# POSTGRES_HOST_AUTH_METHOD=trust) and POSTGRES_DB (default the user), run
# /docker-entrypoint-initdb.d/*.sql and *.sh on a server reachable by its socket only, stop it,
# then exec the command as the postgres user.
set -Eeo pipefail

if [ "${1:0:1}" = '-' ]; then set -- postgres "$@"; fi

if [ "$1" = 'postgres' ] && [ "$(id -u)" = '0' ]; then
  mkdir -p "$PGDATA" && chown -R postgres:postgres "$PGDATA" && chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$BASH_SOURCE" "$@"
fi

if [ "$1" = 'postgres' ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
  : "${POSTGRES_USER:=postgres}"
  : "${POSTGRES_DB:=$POSTGRES_USER}"
  auth="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}"
  if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$auth" != 'trust' ]; then
    echo "error: the database is uninitialized and POSTGRES_PASSWORD is not set (or POSTGRES_HOST_AUTH_METHOD=trust)" >&2
    exit 1
  fi
  # shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of initdb's flags, as in the official image
  initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "${POSTGRES_PASSWORD:-}") \
    --encoding=UTF8 --locale=C.UTF-8 ${POSTGRES_INITDB_ARGS:-} >/dev/null
  echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
  printf '\nhost all all all %s\n' "$auth" >> "$PGDATA/pg_hba.conf"
  pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p 5432" -w start
  export PGUSER="$POSTGRES_USER" PGPASSWORD="${POSTGRES_PASSWORD:-}"
  if [ "$POSTGRES_DB" != 'postgres' ]; then
    # From stdin: psql interpolates :"db" (quoted as an identifier) there, not in -c.
    echo 'CREATE DATABASE :"db";' | psql -v ON_ERROR_STOP=1 --dbname postgres --set db="$POSTGRES_DB" >/dev/null
  fi
  for f in /docker-entrypoint-initdb.d/*; do
    case "$f" in
      *.sql) psql -v ON_ERROR_STOP=1 --dbname "$POSTGRES_DB" -f "$f" ;;
      *.sh) bash "$f" ;;
    esac
  done
  unset PGPASSWORD
  pg_ctl -D "$PGDATA" -m fast -w stop
  echo "PostgreSQL init process complete; ready for start up."
fi

exec "$@"
