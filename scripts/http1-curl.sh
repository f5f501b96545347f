#!/usr/bin/env bash
# Talks to a running sw4rm over HTTP/1.1 with nothing but curl (and bash, od, base64): the
# calls of docs/http1.md, in its order, each answer checked. Two agents register, one sends
# the other a DATA message, the other reads it from StreamIncoming (Connect server streaming),
# confirms it with AckDelivery and answers with an ACK FULFILLED, which reaches the sender's
# stream; then the error answers. Exits non-zero at the first answer that is not the one
# expected. test/http1_curl_test.go runs it against both stores; docs/http1_test.go checks
# that every line of the page's bash blocks is a line of this script.
#
#   SW4RM_ADDR=127.0.0.1:50051 [SW4RM_HTTP_ADDR=127.0.0.1:8080] [FROM=alice TO=bob] scripts/http1-curl.sh
#
# SW4RM_HTTP_ADDR, when set, also checks the descriptor set the HTTP port serves.
set -euo pipefail
export LC_ALL=C # ${#var} counts bytes, as Connect's lengths do

work=$(mktemp -d)
streams=()
cleanup() {
  # Only the curl processes this script started.
  for pid in "${streams[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
ok() { echo "ok: $*"; }
# expect WHAT OUTPUT REGEX: OUTPUT matches the extended regular expression REGEX.
expect() {
  grep -Eq -- "$3" <<<"$2" || fail "$1: expected /$3/, got: $2"
  ok "$1"
}
# wait_for WHAT FILE COMMAND...: COMMAND succeeds within 60 s (a stream's answer arriving).
wait_for() {
  local what=$1 file=$2
  shift 2
  for _ in $(seq 1 600); do
    if "$@"; then
      ok "$what"
      return
    fi
    sleep 0.1
  done
  fail "$what: not within 60 s; the stream so far: $(messages "$file" 2>&1)"
}

# --- docs/http1.md, "Calls with curl" -----------------------------------------------------------

SW4RM_ADDR=${SW4RM_ADDR:-127.0.0.1:50051}   # the gRPC port, which speaks HTTP/1.1 too
FROM=${FROM:-alice} TO=${TO:-bob}           # two agent ids
uuid() { cat /proc/sys/kernel/random/uuid 2>/dev/null || uuidgen | tr 'A-Z' 'a-z'; }

health() {
curl -sS --http1.1 "http://$SW4RM_ADDR/grpc.health.v1.Health/Check" \
  -H 'Connect-Protocol-Version: 1' -H 'Content-Type: application/json' -d '{}'
}
expect "health: SERVING" "$(health)" '"status": ?"SERVING"'

register() {
for id in "$FROM" "$TO"; do
  curl -sS --http1.1 "http://$SW4RM_ADDR/sw4rm.registry.RegistryService/RegisterAgent" \
    -H 'Connect-Protocol-Version: 1' -H 'Content-Type: application/json' \
    -d "{\"agent\":{\"agentId\":\"$id\",\"name\":\"$id\"}}"
  echo
done
}
out=$(register)
expect "RegisterAgent: both accepted" "$(grep -Ec '"accepted": ?true' <<<"$out")" '^2$'

# envelope JSON: JSON as one enveloped message: flag 0x00, 4-byte big-endian length, the bytes.
envelope() {
  local n=${#1}
  printf "$(printf '\\x00\\x%02x\\x%02x\\x%02x\\x%02x' $((n>>24&255)) $((n>>16&255)) $((n>>8&255)) $((n&255)))%s" "$1"
}
# messages FILE: the enveloped messages of a Connect stream, one a line: the flag in hex
# (00 a message, 02 the end of the stream), then the JSON.
messages() {
  local off=0 size flag b1 b2 b3 b4 n
  size=$(wc -c <"$1")
  while ((off + 5 <= size)); do
    read -r flag b1 b2 b3 b4 < <(od -An -tu1 -j "$off" -N 5 "$1")
    n=$((b1 << 24 | b2 << 16 | b3 << 8 | b4))
    ((off + 5 + n <= size)) || break # the rest has not arrived yet
    printf '%02x %s\n' "$flag" "$(tail -c +$((off + 6)) "$1" | head -c "$n")"
    off=$((off + 5 + n))
  done
}

stream() {
envelope "{\"agentId\":\"$TO\"}" > stream-req.bin
curl -sS -N --http1.1 "http://$SW4RM_ADDR/sw4rm.router.RouterService/StreamIncoming" \
  -H 'Connect-Protocol-Version: 1' -H 'Content-Type: application/connect+json' \
  --data-binary @stream-req.bin > "$TO.stream" &
}
stream
streams+=($!)
expect "the stream's request is enveloped" "$(od -An -tx1 stream-req.bin | tr -d ' \n')" "^00$(printf '%08x' $((14 + ${#TO})))7b"

payload='{"text":"hello over HTTP/1.1"}'
msg_id=$(uuid) corr=$(uuid)
send() {
curl -sS --http1.1 "http://$SW4RM_ADDR/sw4rm.router.RouterService/SendMessage" \
  -H 'Connect-Protocol-Version: 1' -H 'Content-Type: application/json' \
  -H "sw4rm-recipient: $TO" \
  -d "{\"msg\":{\"messageId\":\"$msg_id\",\"producerId\":\"$FROM\",\"correlationId\":\"$corr\",
       \"messageType\":\"DATA\",\"contentType\":\"application/json\",\"contentLength\":\"${#payload}\",
       \"payload\":\"$(printf %s "$payload" | base64 | tr -d '\n')\"}}"
}
out=$(send)
expect "SendMessage: accepted" "$out" '"accepted": ?true'

# Not grep -q in these pipelines: it exits at the first match, and under pipefail the writer
# still printing the stream's later items (keep-alives) would then fail the check on SIGPIPE.
delivered() { messages "$TO.stream" | grep -E "^00 .*\"messageId\": ?\"$msg_id\"" >/dev/null; }
wait_for "StreamIncoming: the message is on $TO's stream" "$TO.stream" delivered
messages "$TO.stream"
item=$(messages "$TO.stream" | grep -E "\"messageId\": ?\"$msg_id\"")
seq=$(sed -E 's/.*"seq": ?"([0-9]+)".*/\1/' <<<"$item")
expect "StreamIncoming: the item has a seq" "$seq" '^[1-9][0-9]*$'
expect "StreamIncoming: the payload arrives as sent" \
  "$(sed -E 's/.*"payload": ?"([^"]*)".*/\1/' <<<"$item" | base64 -d)" '^\{"text":"hello over HTTP/1.1"\}$'

confirm() {
curl -sS --http1.1 "http://$SW4RM_ADDR/sw4rm.router.RouterService/AckDelivery" \
  -H 'Connect-Protocol-Version: 1' -H 'Content-Type: application/json' \
  -d "{\"agentId\":\"$TO\",\"seq\":\"$seq\",\"messageId\":\"$msg_id\"}"
}
expect "AckDelivery: recorded" "$(confirm)" '"recorded": ?true'

send_ack() {
ack="{\"ack_for_message_id\":\"$msg_id\",\"ack_stage\":\"FULFILLED\",\"note\":\"done\"}"
curl -sS --http1.1 "http://$SW4RM_ADDR/sw4rm.router.RouterService/SendMessage" \
  -H 'Connect-Protocol-Version: 1' -H 'Content-Type: application/json' \
  -d "{\"msg\":{\"messageId\":\"$(uuid)\",\"producerId\":\"$TO\",\"correlationId\":\"$corr\",
       \"messageType\":\"ACKNOWLEDGEMENT\",\"contentType\":\"application/json\",\"contentLength\":\"${#ack}\",
       \"payload\":\"$(printf %s "$ack" | base64 | tr -d '\n')\"}}"
}
expect "SendMessage of the ACK: accepted" "$(send_ack)" '"accepted": ?true'

# The sender's stream: the ACK RECEIVED that AckDelivery made the router send, and the
# ACK FULFILLED, forwarded.
TO=$FROM stream
streams+=($!)
# acks: the ACK payloads on the sender's stream, decoded.
acks() {
  messages "$FROM.stream" | grep -E '"messageType": ?"ACKNOWLEDGEMENT"' |
    sed -E 's/.*"payload": ?"([^"]*)".*/\1/' | while read -r p; do base64 -d <<<"$p"; echo; done
}
acked() { acks | grep "\"ack_for_message_id\":\"$msg_id\"" | grep "\"ack_stage\":\"$1\"" >/dev/null; }
wait_for "the sender's stream: ACK RECEIVED" "$FROM.stream" acked RECEIVED
wait_for "the sender's stream: ACK FULFILLED" "$FROM.stream" acked FULFILLED
# Keep-alive items (after SW4RM_STREAM_KEEPALIVE of silence): no msg, seq 0; a client skips them.
keepalives=$(cat <(messages "$TO.stream") <(messages "$FROM.stream") | grep -Ec '^00 \{"msg": ?null, ?"seq": ?"0"\}$' || true)
ok "keep-alive items on the two streams so far: $keepalives"

# --- docs/http1.md, "Errors" --------------------------------------------------------------------

rejected() {
curl -sS -i --http1.1 "http://$SW4RM_ADDR/sw4rm.router.RouterService/SendMessage" \
  -H 'Connect-Protocol-Version: 1' -H 'Content-Type: application/json' \
  -H 'sw4rm-recipient: nobody-here' \
  -d "{\"msg\":{\"messageId\":\"$(uuid)\",\"producerId\":\"$FROM\",\"correlationId\":\"$(uuid)\",\"messageType\":\"DATA\"}}"
}
out=$(rejected)
expect "a rejection: HTTP 200" "$out" '^HTTP/1.1 200'
expect "a rejection: accepted false, the reason" "$out" '"accepted": ?false, ?"reason": ?"no_route: '
expect "a rejection: the error code as a trailer- header" "$out" '^[Tt]railer-[Ss]w4rm-[Ee]rror-[Cc]ode: NO_ROUTE'

invalid() {
curl -sS -i --http1.1 "http://$SW4RM_ADDR/sw4rm.router.RouterService/AckDelivery" \
  -H 'Connect-Protocol-Version: 1' -H 'Content-Type: application/json' \
  -d '{"agentId":"","seq":"1"}'
}
out=$(invalid)
expect "an error: HTTP 400" "$out" '^HTTP/1.1 400'
expect "an error: Connect's JSON error" "$out" '^\{"code": ?"invalid_argument", ?"message": ?"validation_error: '
expect "an error: the error code as a trailer- header" "$out" '^[Tt]railer-[Ss]w4rm-[Ee]rror-[Cc]ode: VALIDATION_ERROR'

unregistered() {
envelope '{"agentId":"nobody-here"}' > nobody.bin
curl -sS -N --http1.1 "http://$SW4RM_ADDR/sw4rm.router.RouterService/StreamIncoming" \
  -H 'Connect-Protocol-Version: 1' -H 'Content-Type: application/connect+json' \
  --data-binary @nobody.bin > nobody.stream
messages nobody.stream
}
out=$(unregistered)
expect "a stream's error: HTTP 200, one end-of-stream message" "$(wc -l <<<"$out")" '^1$'
expect "a stream's error: the end-of-stream message" "$out" \
  '^02 \{"error": ?\{"code": ?"not_found", ?"message": ?"no_route: .*\}, ?"metadata": ?\{"sw4rm-error-code": ?\["NO_ROUTE"\]\}\}$'

# --- docs/http1.md, "Discovery" -----------------------------------------------------------------

if [[ -n ${SW4RM_HTTP_ADDR:-} ]]; then
  curl -sS -f "http://$SW4RM_HTTP_ADDR/descriptors.binpb" -o descriptors.binpb
  # A FileDescriptorSet's first byte is field 1's tag (0x0a), and it names the services.
  expect "descriptors.binpb: a FileDescriptorSet" "$(od -An -tx1 -N1 descriptors.binpb | tr -d ' ')" '^0a$'
  expect "descriptors.binpb: RouterService is in it" "$(grep -ac RouterService descriptors.binpb)" '^[1-9]'
fi

echo "PASS: every call of docs/http1.md answered as documented"
