#!/usr/bin/env bash
# Regenerates the Go code for the SW4RM wire contract (proto/sw4rm/*.proto).
#
#   bash proto/generate.sh        # from anywhere; `make proto` calls this
#
# Installs the pinned tools into ${SW4RM_TOOLS_BIN:-$HOME/.cache/sw4rm/bin} if
# they are missing or at the wrong version, then runs `buf lint` and
# `buf generate` (local plugins only; no network needed once tools exist).
# Output lands in proto/<name>pb/ at the repository root.
set -euo pipefail

BUF_VERSION=v1.50.0
PROTOC_GEN_GO_VERSION=v1.36.6
PROTOC_GEN_GO_GRPC_VERSION=v1.5.1

PROTO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOOLS_BIN="${SW4RM_TOOLS_BIN:-$HOME/.cache/sw4rm/bin}"
mkdir -p "$TOOLS_BIN"
export PATH="$TOOLS_BIN:$PATH"

# ensure_tool NAME WANT_VERSION_OUTPUT GO_PACKAGE VERSION
# Installs GO_PACKAGE@VERSION unless $TOOLS_BIN/NAME --version prints WANT.
ensure_tool() {
  local name="$1" want="$2" pkg="$3" version="$4" have=""
  if [[ -x "$TOOLS_BIN/$name" ]]; then
    have="$("$TOOLS_BIN/$name" --version 2>&1 | head -n1 || true)"
  fi
  if [[ "$have" != "$want" ]]; then
    echo "generate.sh: installing $pkg@$version into $TOOLS_BIN (found: '${have:-none}')" >&2
    # go install refuses to overwrite a file that is not a Go binary.
    rm -f "$TOOLS_BIN/$name"
    GOBIN="$TOOLS_BIN" go install "$pkg@$version"
  fi
}

ensure_tool buf "${BUF_VERSION#v}" \
  github.com/bufbuild/buf/cmd/buf "$BUF_VERSION"
ensure_tool protoc-gen-go "protoc-gen-go $PROTOC_GEN_GO_VERSION" \
  google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
ensure_tool protoc-gen-go-grpc "protoc-gen-go-grpc ${PROTOC_GEN_GO_GRPC_VERSION#v}" \
  google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"

cd "$PROTO_DIR"

# Lint rules (and why some STANDARD rules are excepted) live in buf.yaml.
buf lint

# Drop previously generated files so a removed/renamed proto leaves nothing stale.
# Only generated *.pb.go files in the proto/<name>pb/ output dirs are touched.
for dir in "$PROTO_DIR"/*pb; do
  [[ -d "$dir" ]] || continue
  rm -f "$dir"/*.pb.go
done

buf generate

echo "generate.sh: generated Go code under $PROTO_DIR/*pb" >&2
