#!/usr/bin/env bash
# Runs the Temporal dev server and `sw4rm dev` together for a laptop. Called by `make dev`.
# Usage: scripts/dev.sh TEMPORAL_CLI SW4RM_BIN [extra dev-server args...]
set -euo pipefail
temporal=$1; sw4rm=$2; shift 2

address=${SW4RM_TEMPORAL_ADDRESS:-127.0.0.1:7233}
port=${address##*:}
ui_port=${SW4RM_UI_PORT:-8233}
started=""
collector=""

cleanup() {
  for pid in $started $collector; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
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

# The tools example (examples/tools) binds a worktree of the demo repository greet, a Go module
# whose test fails, and reads and edits it through the pinned MCP filesystem server, one per
# worktree. Both are configured here unless SW4RM_REPOS or SW4RM_MCP_SERVERS is set: a user
# who sets them chooses their own repositories and servers.
demo_repo=$PWD/.tmp/demo/greet
if [[ -z "${SW4RM_REPOS+set}" ]]; then
  if [[ ! -d "$demo_repo/.git" ]]; then
    # The files of coder.Seed (`go run ./examples/tools -seed DIR`), without compiling it.
    rm -rf "$demo_repo"
    mkdir -p "$demo_repo"
    for f in examples/tools/coder/seed/*.txt; do cp "$f" "$demo_repo/$(basename "$f" .txt)"; done
    git -C "$demo_repo" init -q -b main
    git -C "$demo_repo" add .
    git -C "$demo_repo" -c user.name=sw4rm -c user.email=sw4rm@example.com commit -q -m "greet: a module whose test fails"
  fi
  export SW4RM_REPOS="greet=$demo_repo"
  repos_line="greet = .tmp/demo/greet, the demo repository of make example-tools"
else
  repos_line="${SW4RM_REPOS:-none} (SW4RM_REPOS as you set it)"
fi
fs_server=${SW4RM_MCP_SERVERS_DIR:-$HOME/.cache/sw4rm/mcp}/node_modules/.bin/mcp-server-filesystem
if [[ -n "${SW4RM_MCP_SERVERS+set}" ]]; then
  mcp_line="${SW4RM_MCP_SERVERS:-none} (SW4RM_MCP_SERVERS as you set it)"
elif [[ -x "$fs_server" ]]; then
  # {worktree}: one filesystem server per calling worktree, allowed that directory only.
  export SW4RM_MCP_SERVERS="fs[network=DENY_ALL]=stdio:$fs_server {worktree}"
  mcp_line="fs = the MCP filesystem server, one per worktree, which make example-tools reads and edits through"
else
  mcp_line="none: the MCP filesystem server is not installed (make mcp-servers needs Node.js and npm); make example-tools needs it"
fi

# `sw4rm dev` configures one HITL operator, dev, unless SW4RM_HITL_OPERATORS is set
# (docs/hitl.md).
hitl_operators=${SW4RM_HITL_OPERATORS-dev=sw4rm-dev-token}
grpc=${SW4RM_GRPC_ADDR:-:50051}
http_port=$(h=${SW4RM_HTTP_ADDR:-:8080}; echo "${h##*:}")
# With the default operator, sw4rm dev leaves its (public) token where the CLI finds it for a
# local server, so no export is needed. With operators of your own, the banner does not echo
# their tokens.
if [[ -z "${SW4RM_HITL_OPERATORS+set}" ]]; then
  operator_hint="bin/sw4rm hitl list   (the CLI finds the dev token itself; elsewhere SW4RM_OPERATOR_TOKEN=${hitl_operators#*=})"
else
  operator_hint="SW4RM_OPERATOR_TOKEN=<token> bin/sw4rm hitl list"
fi
# SW4RM_TRACING=1 make dev exports traces (docs/observability.md): to OTEL_EXPORTER_OTLP_ENDPOINT
# when it is set, else to `sw4rm traces collect`, started here, which writes .tmp/traces.jsonl
# for `sw4rm traces show`.
traces_line="off (SW4RM_TRACING=1 make dev turns them on)"
case "${SW4RM_TRACING:-}" in
  1|true|TRUE|True)
    if [[ -n "${OTEL_EXPORTER_OTLP_ENDPOINT:-}" ]]; then
      traces_line="to $OTEL_EXPORTER_OTLP_ENDPOINT (OTEL_EXPORTER_OTLP_ENDPOINT as you set it)"
    else
      mkdir -p .tmp
      collector_addr=${SW4RM_TRACES_ADDR:-127.0.0.1:4318}
      "$sw4rm" traces collect --addr "$collector_addr" --file .tmp/traces.jsonl > .tmp/traces-collect.log 2>&1 &
      collector=$!
      export OTEL_EXPORTER_OTLP_ENDPOINT="http://$collector_addr" OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf
      traces_line=".tmp/traces.jsonl   (bin/sw4rm traces show lists them; bin/sw4rm traces show <trace id> draws one)"
    fi
    ;;
esac
cat <<MSG

  Temporal UI     http://localhost:$ui_port   (agent lifecycles are workflows named agent/<agent_id>)
  SW4RM gRPC      localhost:${grpc##*:}       (all 15 SW4RM services; try: bin/grpcurl -plaintext localhost:${grpc##*:} list)
  Console         http://localhost:$http_port/console/   (approvals, agents, tasks, DAG runs, dead letters; sign in with the operator token)
  Health          http://localhost:$http_port/healthz
  Metrics         http://localhost:$http_port/metrics
  Traces          $traces_line
  Audit log       ${SW4RM_AUDIT_LOG-.tmp/sw4rm-audit.log}   (tail -f it; SW4RM_VERBOSE=1 make dev shows it here)
  Store           ${SW4RM_DATABASE_URL:+PostgreSQL}${SW4RM_DATABASE_URL:-memory (set SW4RM_DATABASE_URL for PostgreSQL)}
  HITL operators  ${hitl_operators%%=*} (docs/hitl.md)
                  $operator_hint
  Repositories    $repos_line
  MCP servers     $mcp_line

MSG
export SW4RM_TEMPORAL_ADDRESS="$address"
# The console links each run to the Temporal UI.
export SW4RM_TEMPORAL_UI="${SW4RM_TEMPORAL_UI-http://localhost:$ui_port}"
"$sw4rm" dev
