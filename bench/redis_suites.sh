#!/usr/bin/env bash
# Runs Redis's own stream tests against Ringbus's RESP front end and, in the
# same run, against a redis-server, and prints each suite's passed and failed
# counts side by side with the names of the failing tests:
#
#   * Redis 7.0.15's Tcl units unit/type/stream and unit/type/stream-cgroups,
#     in external-server mode (the suite's own `--host/--port`);
#   * redis-py v4.3.4's stream tests (tests/test_commands.py, the test_x*
#     ones) with `--redis-url`, run with Debian's python3-redis (4.3.4).
#
# Usage: bench/redis_suites.sh [--port PORT] [--redis-port PORT] [--no-redis] [--out FILE]
#
#   --port PORT        test the Ringbus RESP listener on 127.0.0.1:PORT; by
#                      default the script starts `mix ringbus.server
#                      --resp-port` on a free port and stops it at the end
#   --redis-port PORT  compare with the redis-server on 127.0.0.1:PORT; by
#                      default the script starts one on a free port
#   --no-redis         run the suites against Ringbus only
#   --out FILE         also write the summary (counts and failing tests) to FILE
#
# Sources (in $SUITES_DIR, default _build/redis_suites, fetched once):
#   REDIS_GIT_DIR     a git directory of redis/redis holding tag 7.0.15 (a bare
#                     mirror will do); without it, cloned from GitHub
#   REDIS_PY_GIT_DIR  the same for redis/redis-py and tag v4.3.4
#
# Skipped in the Tcl units, on both servers: the tests tagged needs:debug
# (they reload the AOF with DEBUG LOADAOF); by the suite itself in external
# mode, those tagged external:skip; and the two tests that send a command
# of another key type (LPUSH, SADD) inside MULTI: Ringbus, which has no such
# keys, refuses it there, and the test stops before its EXEC, leaving the
# suite's client in the transaction, so every later test of the unit would
# fail with QUEUED. Each server gets FLUSHALL before each block of tests,
# so give it no data you want to keep.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

ringbus_port="" redis_port="" with_redis=1 out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --port) ringbus_port="$2"; shift 2 ;;
    --redis-port) redis_port="$2"; shift 2 ;;
    --no-redis) with_redis=0; shift ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "redis_suites: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

redis_tag=7.0.15
skip_tests=(
  "XREAD: XADD + DEL + LPUSH should not awake client"
  "Blocking XREADGROUP: key type changed with transaction"
)
skip_args=()
for t in "${skip_tests[@]}"; do skip_args+=(--skiptest "$t"); done
redis_py_tag=v4.3.4
suites_dir=${SUITES_DIR:-$root/_build/redis_suites}
python=/usr/bin/python3

need=()
command -v tclsh8.6 >/dev/null 2>&1 || need+=(tcl)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
$python -c "import redis" >/dev/null 2>&1 || need+=(python3-redis)
$python -c "import pytest" >/dev/null 2>&1 || need+=(python3-pytest)
if [ ${#need[@]} -gt 0 ]; then
  echo "==> installing ${need[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

# fetch DIR REPO TAG GIT_DIR PATHS...: the files of REPO at TAG under DIR.
fetch() {
  local dir=$1 repo=$2 tag=$3 git_dir=$4; shift 4
  [ -f "$dir/.fetched" ] && return 0
  rm -rf "$dir" && mkdir -p "$dir"
  if [ -n "$git_dir" ]; then
    git --git-dir="$git_dir" archive "$tag" "$@" | tar -x -C "$dir"
  else
    local clone="$dir.clone"
    rm -rf "$clone"
    git clone -q --depth 1 --branch "$tag" "https://github.com/$repo" "$clone"
    (cd "$clone" && tar -c "$@") | tar -x -C "$dir"
    rm -rf "$clone"
  fi
  touch "$dir/.fetched"
}

redis_src=$suites_dir/redis-$redis_tag
redis_py_src=$suites_dir/redis-py-$redis_py_tag
fetch "$redis_src" redis/redis "$redis_tag" "${REDIS_GIT_DIR:-}" runtest tests
fetch "$redis_py_src" redis/redis-py "$redis_py_tag" "${REDIS_PY_GIT_DIR:-}" tests tox.ini

free_port() {
  $python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

started=()
stop_started() {
  local pid
  for pid in "${started[@]}"; do
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
}
trap stop_started EXIT

# await_pong PORT SECONDS
await_pong() {
  local i
  for i in $(seq "$2"); do
    [ "$(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = PONG ] && return 0
    sleep 1
  done
  echo "redis_suites: nothing answers PING on 127.0.0.1:$1" >&2
  return 1
}

logs=$(mktemp -d)

if [ -z "$ringbus_port" ]; then
  ringbus_port=$(free_port)
  mix ringbus.server --port "$(free_port)" --resp-port "$ringbus_port" >"$logs/ringbus.log" 2>&1 &
  started+=($!)
  # The first run compiles.
  await_pong "$ringbus_port" 300
fi

if [ "$with_redis" = 1 ] && [ -z "$redis_port" ]; then
  redis_port=$(free_port)
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$logs" >"$logs/redis.log" 2>&1 &
  started+=($!)
  await_pong "$redis_port" 30
fi

# tcl_suites NAME PORT: the Tcl units against 127.0.0.1:PORT; writes
# $logs/NAME.tcl.txt, one line per test: "unit status name".
tcl_suites() {
  local name=$1 port=$2
  (cd "$redis_src" && timeout 1200 ./runtest --host 127.0.0.1 --port "$port" \
    --single unit/type/stream --single unit/type/stream-cgroups \
    --singledb --ignore-encoding --ignore-digest --durable --timeout 120 \
    --tags -needs:debug "${skip_args[@]}") >"$logs/$name.tcl.log" 2>&1 || true
  sed 's/\x1b\[[0-9;]*m//g' "$logs/$name.tcl.log" | awk '
    /^Testing unit\// { unit = $2; next }
    /^\[ok\]: /        { sub(/^\[ok\]: /, ""); sub(/ \([0-9]+ ms\)$/, ""); print unit "\tpassed\t" $0; next }
    /^\[err\]: /       { sub(/^\[err\]: /, ""); sub(/ in tests\/unit\/.*$/, ""); print unit "\tfailed\t" $0; next }
    /^\[exception\]: / { sub(/^\[exception\]: /, ""); print unit "\tfailed\texception: " $0; next }
    / => \(IN PROGRESS\) / { sub(/^.* => \(IN PROGRESS\) /, ""); print unit "\tfailed\ttimed out: " $0; next }
  ' >"$logs/$name.tcl.txt"
}

# py_suite NAME PORT: redis-py's stream tests against 127.0.0.1:PORT; writes
# $logs/NAME.py.txt as tcl_suites does.
py_suite() {
  local name=$1 port=$2
  # The Tcl units leave stream-node-max-entries at 2 (their last XTRIM test
  # sets it and does not restore it): each suite starts from Redis's
  # defaults, on both servers.
  redis-cli -h 127.0.0.1 -p "$port" config set stream-node-max-entries 100 \
    stream-node-max-bytes 4096 >/dev/null
  (cd "$redis_py_src" && timeout 600 $python -m pytest tests/test_commands.py \
    --redis-url "redis://127.0.0.1:$port/0" -k test_x -p no:cacheprovider \
    -o addopts="" -rA -q) >"$logs/$name.py.log" 2>&1 || true
  awk '
    /^PASSED tests\// { sub(/^PASSED tests\/test_commands.py::/, ""); print "redis-py\tpassed\t" $0 }
    /^(FAILED|ERROR) tests\// { s = $1; sub(/^(FAILED|ERROR) tests\/test_commands.py::/, ""); sub(/ - .*$/, ""); print "redis-py\tfailed\t" $0 }
  ' "$logs/$name.py.log" >"$logs/$name.py.txt"
  if ! grep -qE '(passed|failed|error)' "$logs/$name.py.log" || [ ! -s "$logs/$name.py.txt" ]; then
    echo -e "redis-py\tfailed\tsession: $(grep -m1 -E 'Error|error' "$logs/$name.py.log" || echo 'no result')" >>"$logs/$name.py.txt"
  fi
}

servers=(ringbus)
[ "$with_redis" = 1 ] && servers+=(redis-server)
for server in "${servers[@]}"; do
  port=$ringbus_port; [ "$server" = redis-server ] && port=$redis_port
  echo "==> $server on 127.0.0.1:$port"
  tcl_suites "$server" "$port"
  py_suite "$server" "$port"
  cat "$logs/$server.tcl.txt" "$logs/$server.py.txt" >"$logs/$server.txt"
done

summary() {
  echo "Redis stream suites (Redis $redis_tag Tcl units, redis-py $redis_py_tag), passed/failed"
  printf '%-28s' suite
  for server in "${servers[@]}"; do printf '%16s' "$server"; done
  echo
  for suite in unit/type/stream unit/type/stream-cgroups redis-py; do
    printf '%-28s' "$suite"
    for server in "${servers[@]}"; do
      p=$(awk -F'\t' -v s="$suite" '$1 == s && $2 == "passed"' "$logs/$server.txt" | wc -l)
      f=$(awk -F'\t' -v s="$suite" '$1 == s && $2 == "failed"' "$logs/$server.txt" | wc -l)
      printf '%16s' "$p/$f"
    done
    echo
  done
  # A unit that stops (a hung test, an exception outside a test) runs
  # fewer tests than redis-server ran.
  if [ "$with_redis" = 1 ]; then
    for suite in unit/type/stream unit/type/stream-cgroups redis-py; do
      ours=$(awk -F'\t' -v s="$suite" '$1 == s' "$logs/ringbus.txt" | wc -l)
      theirs=$(awk -F'\t' -v s="$suite" '$1 == s' "$logs/redis-server.txt" | wc -l)
      [ "$ours" -lt "$theirs" ] && echo "$suite: $((theirs - ours)) of redis-server's tests not run on ringbus"
    done
  fi
  echo
  echo "skipped on both:"
  printf '  %s\n' "${skip_tests[@]}"
  for server in "${servers[@]}"; do
    echo
    echo "failing on $server:"
    awk -F'\t' '$2 == "failed" { print "  " $1 ": " $3 }' "$logs/$server.txt"
  done
}

summary | tee ${out:+"$out"}
echo "(logs: $logs)"
