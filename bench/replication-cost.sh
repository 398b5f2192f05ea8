#!/usr/bin/env bash
# The cost of synchronous replication, side by side with asynchronous, on one machine:
# makes a PostgreSQL primary and a streaming replica of its own (initdb, pg_basebackup -R)
# in a temporary directory on free ports, runs `bench run --only approvals` against the
# primary with the replica synchronous (synchronous_standby_names = '*'), then
# asynchronous (''), alternating ROUNDS times, and prints each figure of each run.
#
#   cargo build --release --workspace --bins && bench/replication-cost.sh [ROUNDS] [-- bench args]
#
# PostgreSQL's tools come from PG_BINDIR (default: the newest /usr/lib/postgresql/*/bin);
# as root they run as the `postgres` user. Everything is stopped and removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-2}
shift || true
[ "${1:-}" = "--" ] && shift
bench_args=("$@")
bench=target/release/bench
[ -x "$bench" ] || { echo "error: build it first: cargo build --release --workspace --bins" >&2; exit 1; }

bindir=${PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)}
as_postgres() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

root=$(mktemp -d /tmp/outbox-replication-cost.XXXXXX)
[ "$(id -u)" -eq 0 ] && chown postgres:postgres "$root"
primary_port=$(free_port)
replica_port=$(free_port)
cleanup() {
  as_postgres "$bindir/pg_ctl" stop -m immediate -D "$root/replica" >/dev/null 2>&1 || true
  as_postgres "$bindir/pg_ctl" stop -m immediate -D "$root/primary" >/dev/null 2>&1 || true
  rm -rf "$root"
}
trap cleanup EXIT

as_postgres "$bindir/initdb" -D "$root/primary" -U postgres --auth=trust >/dev/null
cat >>"$root/primary/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $primary_port
unix_socket_directories = '$root'
wal_level = replica
max_wal_senders = 5
max_replication_slots = 5
synchronous_commit = on
CONF
printf 'local all all trust\nhost all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n' \
  >"$root/primary/pg_hba.conf"
as_postgres "$bindir/pg_ctl" start -w -D "$root/primary" -l "$root/primary.log" >/dev/null
as_postgres "$bindir/pg_basebackup" -h 127.0.0.1 -p "$primary_port" -U postgres \
  -D "$root/replica" -R -X stream >/dev/null
printf 'port = %s\n' "$replica_port" >>"$root/replica/postgresql.conf"
as_postgres "$bindir/pg_ctl" start -w -D "$root/replica" -l "$root/replica.log" >/dev/null

psql_primary() { psql -h 127.0.0.1 -p "$primary_port" -U postgres -d postgres -Atq "$@"; }
set_mode() {
  local names=$1
  psql_primary -c "ALTER SYSTEM SET synchronous_standby_names = '$names'" -c "SELECT pg_reload_conf()" >/dev/null
  # Wait until the replica streams and, in synchronous mode, is the synchronous standby.
  for _ in $(seq 1 100); do
    state=$(psql_primary -c "SELECT sync_state FROM pg_stat_replication LIMIT 1")
    if { [ -n "$names" ] && [ "$state" = sync ]; } || { [ -z "$names" ] && [ "$state" = async ]; }; then
      return
    fi
    sleep 0.1
  done
  echo "error: the replica did not become ${names:+synchronous}${names:-asynchronous}" >&2
  exit 1
}

url="postgres://postgres@127.0.0.1:$primary_port/postgres"
for round in $(seq 1 "$rounds"); do
  for mode in synchronous asynchronous; do
    if [ "$mode" = synchronous ]; then set_mode '*'; else set_mode ''; fi
    echo "== round $round, $mode replication"
    "$bench" run --only approvals --server-url "$url" "${bench_args[@]}"
  done
done
