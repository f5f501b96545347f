#!/usr/bin/env bash
# Runs what the README promises a newcomer: `make dev`, then every `make example-*` in a row,
# twice, each of which must exit 0 within its deadline. Called by `make test-examples`, which
# `make test` runs. The examples are discovered from the Makefile, so a new example target is
# covered without editing this script.
#
# `make dev` runs on ports of its own (SW4RM_EXAMPLES_PORT_BASE, 15000 by default) so a
# developer's own `make dev` on the default ports can keep running.
set -euo pipefail
cd "$(dirname "$0")/.."

base=${SW4RM_EXAMPLES_PORT_BASE:-15000}
rounds=${SW4RM_EXAMPLES_ROUNDS:-2}
deadline=${SW4RM_EXAMPLES_DEADLINE:-240}
# Nobody is there to decide the approvals example's HITL wait: a short wait ends it on the fallback.
export APPROVALS_WAIT=${APPROVALS_WAIT:-10s}
export SW4RM_TEMPORAL_ADDRESS=127.0.0.1:$((base + 233))
export SW4RM_UI_PORT=$((base + 234))
export SW4RM_GRPC_ADDR=127.0.0.1:$((base + 51))
export SW4RM_HTTP_ADDR=127.0.0.1:$((base + 80))
export SW4RM_SERVER=$SW4RM_GRPC_ADDR
# The examples run traced, as SW4RM_TRACING=1 make dev runs them, into make dev's own OTLP
# receiver (sw4rm traces collect); at the end, every pattern must have left its spans.
export SW4RM_TRACING=${SW4RM_TRACING-1} SW4RM_TRACES_ADDR=127.0.0.1:$((base + 318))
unset OTEL_EXPORTER_OTLP_ENDPOINT
traces=.tmp/traces.jsonl

mkdir -p .tmp
: > "$traces"
log=.tmp/examples-dev.log
examples=$(sed -n 's/^\(example-[A-Za-z0-9_-]*\):.*/\1/p' Makefile)
[[ -n "$examples" ]] || { echo "examples: no example-* targets in the Makefile" >&2; exit 1; }

# make dev runs in a process group of its own, so stopping it stops the dev server and
# sw4rm dev with it.
set -m
make --no-print-directory dev > "$log" 2>&1 &
dev=$!
set +m
stop() {
  kill -TERM -- "-$dev" 2>/dev/null || true
  wait "$dev" 2>/dev/null || true
}
trap stop EXIT

# healthy asks /healthz with bash alone: a fresh machine may have no curl.
healthy() {
  (exec 3<>"/dev/tcp/127.0.0.1/$((base + 80))" &&
    printf 'GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3 &&
    head -n 1 <&3 | grep -q ' 200') 2>/dev/null
}

echo "examples: waiting for make dev (log in $log)"
for _ in $(seq 1 600); do
  if healthy; then break; fi
  if ! kill -0 "$dev" 2>/dev/null; then echo "examples: make dev exited" >&2; tail -n 40 "$log" >&2; exit 1; fi
  sleep 0.5
done
healthy || { echo "examples: make dev did not become healthy" >&2; tail -n 40 "$log" >&2; exit 1; }

failed=0
for round in $(seq 1 "$rounds"); do
  for ex in $examples; do
    out=.tmp/$ex.$round.log
    began=$SECONDS
    if timeout --kill-after=10 "$deadline" make --no-print-directory "$ex" > "$out" 2>&1; then
      echo "examples: round $round: $ex ok ($((SECONDS - began)) s)"
    else
      rc=$?
      echo "examples: round $round: $ex FAILED (exit $rc after $((SECONDS - began)) s); its output:" >&2
      tail -n 60 "$out" >&2
      failed=1
    fi
  done
done
if [[ $failed != 0 ]]; then
  echo "examples: the end of make dev's log:" >&2
  tail -n 60 "$log" >&2
  exit 1
fi

# The traces: a DAG run's workflow, a task's, a tool call's and a message's delivery must all be
# among the spans make dev exported (docs/observability.md); the batch exporter flushes within
# five seconds.
if [[ "$SW4RM_TRACING" == 1 ]]; then
  missing=""
  for name in RunWorkflow:DAGRun RunWorkflow:TaskWorkflow RunWorkflow:ToolCall deliver; do
    for _ in $(seq 1 20); do grep -q "\"name\":\"$name" "$traces" && break; sleep 0.5; done
    grep -q "\"name\":\"$name" "$traces" || missing="$missing $name"
  done
  if [[ -n "$missing" ]]; then
    echo "examples: no span named$missing in $traces" >&2
    exit 1
  fi
  echo "examples: traced: $(wc -l < "$traces") spans in $(bin/sw4rm traces show --file "$traces" --last 0 | tail -n +2 | wc -l) traces"
fi
