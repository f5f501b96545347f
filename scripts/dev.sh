#!/usr/bin/env bash
# Runs the Temporal dev server and `sw4rm dev` together for a laptop. Called by `make dev`.
# Usage: scripts/dev.sh TEMPORAL_CLI SW4RM_BIN [extra dev-server args...]
set -euo pipefail
temporal=$1; sw4rm=$2; shift 2

address=${SW4RM_TEMPORAL_ADDRESS:-127.0.0.1:7233}
port=${address##*:}
ui_port=${SW4RM_UI_PORT:-8233}
started=""

cleanup() {
  if [[ -n "$started" ]]; then
    kill "$started" 2>/dev/null || true
    wait "$started" 2>/dev/null || true
  fi
}
trap cleanup EXIT INT TERM

if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
  echo "Temporal already listening on $address; using it."
else
  mkdir -p .tmp
  echo "Starting the Temporal dev server on $address (UI on :$ui_port, log in .tmp/temporal.log)..."
  "$temporal" server start-dev --ip 127.0.0.1 --port "$port" --ui-port "$ui_port" \
    --log-level warn "$@" > .tmp/temporal.log 2>&1 &
  started=$!
  for _ in $(seq 1 120); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
    if ! kill -0 "$started" 2>/dev/null; then echo "the Temporal dev server exited; see .tmp/temporal.log" >&2; exit 1; fi
    sleep 0.5
  done
fi

# `sw4rm dev` configures one HITL operator, dev, unless SW4RM_HITL_OPERATORS is set
# (docs/hitl.md).
hitl_operators=${SW4RM_HITL_OPERATORS-dev=sw4rm-dev-token}
grpc=${SW4RM_GRPC_ADDR:-:50051}
http_port=$(h=${SW4RM_HTTP_ADDR:-:8080}; echo "${h##*:}")
# With the default operator, its token is public anyway: print the line to paste. With
# operators of your own, the banner does not echo their tokens.
if [[ -z "${SW4RM_HITL_OPERATORS+set}" ]]; then
  operator_hint="export SW4RM_OPERATOR_TOKEN=${hitl_operators#*=}   then: bin/sw4rm hitl list"
else
  operator_hint="SW4RM_OPERATOR_TOKEN=<token> bin/sw4rm hitl list"
fi
cat <<MSG

  Temporal UI     http://localhost:$ui_port   (agent lifecycles are workflows named agent/<agent_id>)
  SW4RM gRPC      localhost:${grpc##*:}       (all 15 SW4RM services; try: bin/grpcurl -plaintext localhost:${grpc##*:} list)
  Health          http://localhost:$http_port/healthz
  Metrics         http://localhost:$http_port/metrics
  Store           ${SW4RM_DATABASE_URL:+PostgreSQL}${SW4RM_DATABASE_URL:-memory (set SW4RM_DATABASE_URL for PostgreSQL)}
  HITL operators  ${hitl_operators%%=*} (docs/hitl.md)
                  $operator_hint

MSG
export SW4RM_TEMPORAL_ADDRESS="$address"
"$sw4rm" dev
