# SW4RM on Temporal. The two commands a newcomer needs: `make dev` and `make test`.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c

# Tools are installed outside the clone so every checkout reuses them.
TOOLS_BIN        ?= $(HOME)/.cache/sw4rm/bin
TEMPORAL_VERSION ?= v1.5.1
TEMPORAL         := $(TOOLS_BIN)/temporal
WORKFLOWCHECK_VERSION ?= v0.6.0
WORKFLOWCHECK    := $(TOOLS_BIN)/workflowcheck
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT    := $(TOOLS_BIN)/golangci-lint
GRPCURL_VERSION  ?= v1.9.3
GRPCURL          := $(TOOLS_BIN)/grpcurl
# The Temporal server and its SQL schema tool of `make cluster`: the go.temporal.io/server
# version the pinned Temporal CLI is built on, so that the two share the Go build cache.
# Installed per version (go install names them server and sql), linked under their usual names.
TEMPORAL_SERVER_VERSION ?= v1.29.1
TEMPORAL_SERVER_DIR := $(TOOLS_BIN)/temporal-server-$(TEMPORAL_SERVER_VERSION)
TEMPORAL_SERVER  := $(TOOLS_BIN)/temporal-server
TEMPORAL_SQL_TOOL := $(TOOLS_BIN)/temporal-sql-tool
# The npm MCP servers the tests of tools/mcp run against, pinned by tools/mcp/npm's lock file.
MCP_SERVERS_DIR  ?= $(HOME)/.cache/sw4rm/mcp
MCP_SERVERS_LOCK := tools/mcp/npm/package-lock.json
BIN              := bin/sw4rm

# Custom search attributes are registered at dev-server start from the list the code keeps
# (`sw4rm search-attributes` prints workflows.SearchAttributes() as flags); sw4rm also
# registers any missing ones itself on start, for clusters that were not started this way.

# The dev server has one history shard, and its transfer queue (the one that hands a signalled
# workflow's next task to matching) polls at most 20 times a second by default, which puts up
# to 50 ms between a signal and the workflow seeing it. A scheduler that must preempt within
# 50 ms raises that bound (docs/benchmarks.md, "Temporal's transfer queue"); the tests start
# their dev server with the same flag.
TEMPORAL_DEV_FLAGS := --dynamic-config-value history.transferProcessorMaxPollRPS=1000

export SW4RM_TEMPORAL_CLI := $(TEMPORAL)
export SW4RM_MCP_SERVERS_DIR := $(MCP_SERVERS_DIR)

.PHONY: all help build dev tools temporal cluster cluster-tools test test-escape test-examples test-unit test-e2e test-faults test-scale bench proto browser-bundle lint workflowcheck mcp-servers clean

all: build

## help: list the documented targets, read from the `## target: text` comments of this
## Makefile, so the list cannot go stale.
help:
	@awk '/^## [A-Za-z0-9_-]+:/ { sub(/^## /, ""); i = index($$0, ":"); \
	    printf "%-16s %s\n", substr($$0, 1, i - 1), substr($$0, i + 2); more = 1; next } \
	  more && /^## / { sub(/^## /, ""); printf "%-16s %s\n", "", $$0; next } \
	  { more = 0 }' $(firstword $(MAKEFILE_LIST))

## build: build bin/sw4rm; `bin/sw4rm --version` names the commit and the pinned Temporal CLI.
build:
	go build -buildvcs=auto -ldflags "-X main.temporalCLIVersion=$(TEMPORAL_VERSION)" -o $(BIN) ./cmd/sw4rm

## temporal: install the official Temporal CLI (dev server) at a pinned version.
temporal: $(TEMPORAL)
$(TEMPORAL):
	mkdir -p $(TOOLS_BIN)
	GOBIN=$(TOOLS_BIN) go install github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_VERSION)

## tools: install the pinned Temporal CLI and grpcurl and link them into bin/, beside
## bin/sw4rm, so the docs' `bin/temporal ...` and `bin/grpcurl ...` lines work as printed.
tools: $(TEMPORAL) $(GRPCURL)
	mkdir -p bin
	ln -sf $(TEMPORAL) bin/temporal
	ln -sf $(GRPCURL) bin/grpcurl
$(GRPCURL):
	mkdir -p $(TOOLS_BIN)
	GOBIN=$(TOOLS_BIN) go install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)

## cluster-tools: install temporal-server and temporal-sql-tool (go.temporal.io/server at
## TEMPORAL_SERVER_VERSION) into $(TOOLS_BIN); the first build takes several minutes.
cluster-tools: $(TEMPORAL_SERVER_DIR)/server $(TEMPORAL_SERVER_DIR)/sql
	ln -sf $(TEMPORAL_SERVER_DIR)/server $(TEMPORAL_SERVER)
	ln -sf $(TEMPORAL_SERVER_DIR)/sql $(TEMPORAL_SQL_TOOL)
$(TEMPORAL_SERVER_DIR)/server $(TEMPORAL_SERVER_DIR)/sql &:
	mkdir -p $(TEMPORAL_SERVER_DIR)
	GOBIN=$(TEMPORAL_SERVER_DIR) go install go.temporal.io/server/cmd/server@$(TEMPORAL_SERVER_VERSION) go.temporal.io/server/cmd/tools/sql@$(TEMPORAL_SERVER_VERSION)

## cluster: run a production-shaped cluster on this machine in the foreground (package
## cluster, docs/deploy.md "A cluster on one machine"): a Temporal server on PostgreSQL with
## 4 history shards, two `sw4rm server`s behind a load balancer on :16000 and three `sw4rm
## worker`s; it prints every address, Ctrl-C stops it. Its databases go in the local server
## (SW4RM_DATABASE_URL); CLUSTER_FLAGS=-fresh starts them anew, -own-postgres uses initdb.
CLUSTER_FLAGS ?=
cluster: cluster-tools build
	go build -o bin/sw4rm-cluster ./cluster/cmd/sw4rm-cluster
	bin/sw4rm-cluster up $(CLUSTER_FLAGS)

## soak: the soak on a cluster of its own (cluster/cmd/sw4rm-cluster soak; docs/reliability.md,
## "The soak"): loadgen's mixed load with kill -9 of a server and a worker, Temporal and
## PostgreSQL killed and restarted on a schedule, figures every minute; exits 1 on anything
## lost, doubled or stranded or on growth that is not flat. SOAK_FLAGS="-duration 1h
## -fault-cycle 5m" is the one-hour run whose figures reliability.md gives.
SOAK_FLAGS ?=
.PHONY: soak
soak: cluster-tools build
	go build -o bin/sw4rm-cluster ./cluster/cmd/sw4rm-cluster
	bin/sw4rm-cluster soak -state .cluster/soak -fresh $(SOAK_FLAGS)

## sizing: the sizing figures of docs/deploy.md ("Sizing"): a cluster of its own, each
## pattern alone at a saturating load without faults, a table of operations per second and
## per CPU second and where the CPU went (cluster/cmd/sw4rm-cluster sizing).
SIZING_FLAGS ?=
.PHONY: sizing
sizing: cluster-tools build
	go build -o bin/sw4rm-cluster ./cluster/cmd/sw4rm-cluster
	bin/sw4rm-cluster sizing -state .cluster/sizing -own-postgres -fresh -base-port 16100 $(SIZING_FLAGS)

## dev: start the Temporal dev server (UI on :8233) and `sw4rm dev` (gRPC on :50051); the
## Temporal CLI and grpcurl are linked into bin/ (make tools). It serves the demo repository
## and the MCP filesystem server that `make example-tools` uses (scripts/dev.sh); without
## npm it starts without the filesystem server.
dev: tools build
	@$(MAKE) --no-print-directory mcp-servers || echo "dev: the MCP servers are not installed (make mcp-servers needs Node.js and npm); starting without them, so make example-tools will not work" >&2
	./scripts/dev.sh "$(TEMPORAL)" "$(BIN)" $$("$(BIN)" search-attributes) $(TEMPORAL_DEV_FLAGS)

## test: unit, workflow and end-to-end tests (needs PostgreSQL; .ci/run starts it), among
## them the cluster kit's (test/cluster: a real Temporal server, make cluster-tools), the
## escape suite, the 1,000-node DAG run without the race detector, the fault suite on its
## own, verbose so that its figures are printed (docs/reliability.md), the soak's 3-minute
## profile and the rolling upgrade on the cluster kit, and last the examples against `make dev`.
test: $(TEMPORAL) cluster-tools workflowcheck lint mcp-servers
	go vet ./...
	$(MAKE) check-deploy
	go test -race -count=1 -timeout 20m -skip '$(ESCAPE_TESTS)' $$(go list ./... | grep -v -e /test/faults$$ -e /test/soak$$ -e /test/upgrade$$)
	$(MAKE) test-escape
	$(MAKE) test-scale
	go test -race -count=1 -timeout 15m -v ./test/faults
	$(MAKE) test-cluster
	$(MAKE) test-examples

## test-cluster: on the cluster kit (make cluster-tools), side by side: the soak's 3-minute CI
## profile with its faults (test/soak; docs/reliability.md, "The soak") and the rolling upgrade
## from the previous release's tag (test/upgrade; docs/deploy.md, "Upgrading"), verbose for
## their figures, without the race detector so the processes keep a deployment's timing.
.PHONY: test-cluster
test-cluster: cluster-tools
	go test -count=1 -timeout 25m -v ./test/soak ./test/upgrade

## check-deploy: check docker-compose.yml and deploy/k8s without Docker or a cluster: the
## compose spec's schema, the Kubernetes API's types and OpenAPI schemas, and their SW4RM_*
## variables against the settings table (deploy/check, a module of its own).
.PHONY: check-deploy
check-deploy:
	cd deploy/check && go vet ./... && go test -count=1 ./...

## test-examples: what the README promises a newcomer, as a script runs it: `make dev`, then
## every `make example-*` in a row, twice, each exiting 0 within its deadline
## (scripts/examples.sh; `make dev` on ports of its own, 15000 and up).
test-examples: tools build mcp-servers
	./scripts/examples.sh

## test-escape: the escape suite (docs/tools.md, "The escape suite"): every attempt from
## inside process.run and an MCP server with its twin. Prints each group's figure, then the
## sum of all groups; on a failure, the whole output.
ESCAPE_TESTS := ^(TestEscapeFilesystem|TestEscapeLimits|TestEscapeProcesses|TestEscapeUnixSockets|TestNetworkEscapes|TestEscapeMCPServer)$$
test-escape: $(TEMPORAL) mcp-servers
	@go test -race -count=1 -timeout 15m -v -run '$(ESCAPE_TESTS)' ./tools/builtin/ ./test/ > .escape.out 2>&1; s=$$?; \
	grep -E 'escape suite \(|^network escapes:' .escape.out | sed -E 's/^.*(escape suite \(|network escapes:)/\1/' > .escape-groups.out; \
	cat .escape-groups.out; \
	awk -F'[:,]' '{a+=$$2; r+=$$3; t+=$$4} END {printf "escape suite: %d attempts, %d refused, %d twins passed\n", a, r, t}' .escape-groups.out; \
	[ $$s -eq 0 ] || { cat .escape.out; exit $$s; }

## test-scale: the 1,000-node DAG run end to end (PostgreSQL; a few minutes), without the
## race detector, which makes it several times slower (docs/dag.md, "Scale").
test-scale: $(TEMPORAL)
	go test -count=1 -timeout 10m -v -run '^TestDAGRunThousandNodes$$' ./test

test-unit: mcp-servers
	go test -race -count=1 $$(go list ./... | grep -v -e /test$$ -e /test/faults$$)

## test-faults: the fault suite alone (kill -9 of sw4rm, Temporal and PostgreSQL restarts).
test-faults: $(TEMPORAL)
	go test -race -count=1 -timeout 15m -v ./test/faults

test-e2e: $(TEMPORAL)
	go test -race -count=1 -v ./test/...

## bench: benchmarks with their same-run baselines (see docs/benchmarks.md).
bench: $(TEMPORAL)
	go test -run '^$$' -bench . -benchtime 2s -count 1 ./test/... | tee .bench.out
	go run ./test/benchreport < .bench.out

## proto: regenerate the Go code of proto/sw4rm/*.proto with pinned generators.
proto:
	bash proto/generate.sh

## browser-bundle: remake the page of the browser test (test/browser: the TypeScript
## protoc-gen-es generates from proto/, and the esbuild bundle of it and src/) with the tools
## test/browser/package-lock.json pins; commit gen/ and dist/. Needs Node.js and npm, which
## the test does not: it serves the committed bundle, and fails if its inputs changed since.
browser-bundle:
	npm ci --prefix test/browser --no-audit --no-fund --ignore-scripts
	npm run --prefix test/browser build

## workflowcheck: static determinism check of workflow code.
workflowcheck: $(WORKFLOWCHECK)
	$(WORKFLOWCHECK) ./workflows/...
$(WORKFLOWCHECK):
	mkdir -p $(TOOLS_BIN)
	GOBIN=$(TOOLS_BIN) go install go.temporal.io/sdk/contrib/tools/workflowcheck@$(WORKFLOWCHECK_VERSION)

## mcp-servers: install the npm MCP servers the tests of tools/mcp start
## (@modelcontextprotocol/server-everything and server-filesystem) at the versions
## tools/mcp/npm/package-lock.json pins, into $(MCP_SERVERS_DIR). Skipped when that lock file
## is already installed there; a changed lock file reinstalls. Needs Node.js and npm.
mcp-servers:
	@if cmp -s $(MCP_SERVERS_LOCK) $(MCP_SERVERS_DIR)/installed.lock \
	  && [ -x $(MCP_SERVERS_DIR)/node_modules/.bin/mcp-server-everything ] \
	  && [ -x $(MCP_SERVERS_DIR)/node_modules/.bin/mcp-server-filesystem ]; then \
	  echo "mcp-servers: already installed in $(MCP_SERVERS_DIR)"; \
	else \
	  rm -f $(MCP_SERVERS_DIR)/installed.lock; \
	  mkdir -p $(MCP_SERVERS_DIR); \
	  cp tools/mcp/npm/package.json $(MCP_SERVERS_LOCK) $(MCP_SERVERS_DIR)/; \
	  npm ci --prefix $(MCP_SERVERS_DIR) --no-audit --no-fund --ignore-scripts; \
	  cp $(MCP_SERVERS_LOCK) $(MCP_SERVERS_DIR)/installed.lock; \
	fi

## lint: staticcheck, revive's exported rule, errcheck and the import grouping (standard /
## third-party / project) through golangci-lint, pinned; .golangci.yml says what runs.
lint: $(GOLANGCI_LINT)
	$(GOLANGCI_LINT) run ./...
$(GOLANGCI_LINT):
	mkdir -p $(TOOLS_BIN)
	GOBIN=$(TOOLS_BIN) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

clean:
	rm -rf bin .bench.out .escape.out .escape-groups.out

## example-room: run the negotiation room example against a running server (`make dev`;
## SW4RM_SERVER overrides localhost:50051). See examples/negotiation-room/README.md.
.PHONY: example-room
example-room:
	go run ./examples/negotiation-room

## example-handoff: run the handoff example against a running server (`make dev`;
## SW4RM_SERVER overrides localhost:50051). See examples/handoff/README.md.
.PHONY: example-handoff
example-handoff:
	go run ./examples/handoff

## example-dag: run the DAG workflow example against a running server (`make dev`;
## SW4RM_SERVER overrides localhost:50051). See examples/dag/README.md.
.PHONY: example-dag
example-dag:
	go run ./examples/dag

## example-debate: run the negotiation and debate example (a contract negotiation, then
## ADR-011's A/B harness of debate against the parallel vote) against a running server
## (`make dev`; SW4RM_SERVER overrides localhost:50051). See examples/debate/README.md.
.PHONY: example-debate
example-debate:
	go run ./examples/debate

## example-tools: run the tools example (an agent fixes a failing test through an MCP
## filesystem server and the built-in process tool) against a running server (`make dev`,
## which serves its repository and filesystem server; SW4RM_SERVER overrides
## localhost:50051). See examples/tools/README.md.
.PHONY: example-tools
example-tools:
	go run ./examples/tools

## example-approvals: run the approvals example (an agent asks a human before a destructive
## tool call, prints the `bin/sw4rm hitl decide` command, waits APPROVALS_WAIT — 60s by
## default — then proceeds or falls back) against a running server (`make dev`; SW4RM_SERVER
## overrides localhost:50051). See examples/approvals/README.md.
APPROVALS_WAIT ?= 60s
.PHONY: example-approvals
example-approvals:
	go run ./examples/approvals -wait $(APPROVALS_WAIT)
