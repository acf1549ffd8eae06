#!/usr/bin/env bash
# Starts the services the test suites use, when they are installed and not running:
# PostgreSQL (role and database for the tests) and dockerd; installs schemathesis when missing. Needs root; without it, says so and
# leaves the suites to print their SKIPPED lines. Installing them is .ci/run's job (apt-get).
set -uo pipefail

PG_USER=${HANGAR_TEST_PG_USER:-hangar}
PG_PASSWORD=${HANGAR_TEST_PG_PASSWORD:-hangar}
PG_DB=${HANGAR_TEST_PG_DB:-hangar_test}

if [ "$(id -u)" != 0 ]; then
  echo "services: not root; start PostgreSQL and dockerd yourself (see docs/development.md)"
  exit 0
fi

start_postgres() {
  if ! command -v pg_lsclusters >/dev/null 2>&1; then
    echo "services: PostgreSQL is not installed (apt-get install postgresql)"
    return 0
  fi
  local version cluster
  read -r version cluster _ < <(pg_lsclusters --no-header | head -n 1)
  if [ -z "${version:-}" ]; then
    version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
    cluster=main
    pg_createcluster "$version" "$cluster" >/dev/null
  fi
  if ! pg_lsclusters --no-header | grep -q "^$version *$cluster .*online"; then
    pg_ctlcluster "$version" "$cluster" start
  fi
  for _ in $(seq 1 30); do
    su postgres -c "psql -qAtc 'select 1'" >/dev/null 2>&1 && break
    sleep 0.5
  done
  su postgres -c "psql -qAtc \"select 1 from pg_roles where rolname = '$PG_USER'\"" | grep -q 1 ||
    su postgres -c "psql -qc \"create role $PG_USER login superuser password '$PG_PASSWORD'\""
  su postgres -c "psql -qAtc \"select 1 from pg_database where datname = '$PG_DB'\"" | grep -q 1 ||
    su postgres -c "createdb -O $PG_USER $PG_DB"
  echo "services: PostgreSQL $version/$cluster is up (postgres://$PG_USER:…@127.0.0.1:5432/$PG_DB)"
}

start_docker() {
  if ! command -v dockerd >/dev/null 2>&1; then
    echo "services: dockerd is not installed (apt-get install docker.io)"
    return 0
  fi
  if docker info >/dev/null 2>&1; then
    echo "services: dockerd is already running"
    return 0
  fi
  mkdir -p /var/log
  # Restarted when it exits unasked, in its own session (scripts/dockerd-supervised.sh).
  setsid bash "$(dirname "$0")/dockerd-supervised.sh" >/dev/null 2>&1 </dev/null &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && { echo "services: dockerd is up"; return 0; }
    sleep 0.5
  done
  echo "services: dockerd did not come up; see /var/log/hangar-dockerd.log"
  tail -n 20 /var/log/hangar-dockerd.log
}

start_postgres
start_docker
# The API fuzzer the test suite runs (pinned, from PyPI; cached by version).
bash "$(dirname "$0")/schemathesis.sh" || echo "services: schemathesis could not be installed; its suite will say so"
exit 0
