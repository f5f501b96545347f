package test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/signing"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/sdk"
)

// connectPost makes a Connect call over HTTP/1.1 with plain net/http, as a client that knows
// nothing of gRPC would, signed as agent with key over body exactly as sent when key is set.
// signed, when not nil, is signed in place of body: a client that signed one encoding and
// sent another.
func connectPost(t *testing.T, addr, method, contentType string, body []byte, agent string, key ed25519.PrivateKey, signed []byte, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+method, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Connect-Protocol-Version", "1")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if key != nil {
		if signed == nil {
			signed = body
		}
		for k, v := range signing.Sign(key, signing.Call{Method: method, AgentID: agent, Timestamp: time.Now(), Nonce: nonce(), Body: signed}) {
			req.Header.Set(k, v)
		}
	}
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{ForceAttemptHTTP2: false}}
	resp, err := client.Do(req)
	require.NoError(t, err)
	require.Equal(t, "HTTP/1.1", resp.Proto)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	return string(b)
}

// envelope frames msg as one Connect streaming message.
func envelope(msg []byte) []byte {
	out := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}

// TestSignedJSONOverHTTP1 (§6.2 over §5.1's HTTP/1.1 fallback): in required mode an agent that
// speaks only Connect JSON over HTTP/1.1 registers its key and calls as itself, its signature
// covering the JSON bytes it sent (docs/signing.md); a signature of another encoding of the
// same message is refused; a gzip body is hashed as sent before compression; and a signed
// StreamIncoming over HTTP/1.1 is admitted and kept alive with empty items.
func TestSignedJSONOverHTTP1(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			cfg := authConfig(t, kind, auth.Required)
			cfg.StreamKeepAlive = 200 * time.Millisecond
			sys := start(t, cfg)
			addr := sys.app.GRPCAddr()
			pub, key, err := ed25519.GenerateKey(rand.Reader)
			require.NoError(t, err)
			agent := uniq(t, "json-agent")

			register := fmt.Appendf(nil, `{"agent": {"agent_id": %q, "name": "json agent", "public_key": %q}}`, agent, base64.StdEncoding.EncodeToString(pub))
			resp := connectPost(t, addr, "/sw4rm.registry.RegistryService/RegisterAgent", "application/json", register, agent, key, nil, nil)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			assert.JSONEq(t, `{"accepted": true, "reason": ""}`, readAll(t, resp.Body))

			heartbeat := fmt.Appendf(nil, `{"agent_id":%q,"state":"RUNNING"}`, agent)
			resp = connectPost(t, addr, "/sw4rm.registry.RegistryService/Heartbeat", "application/json", heartbeat, agent, key, nil, nil)
			require.Equal(t, http.StatusOK, resp.StatusCode, readAll(t, resp.Body))

			// The same message, other bytes: the signature of the compact form does not cover them.
			spaced := fmt.Appendf(nil, `{ "agent_id": %q, "state": "RUNNING" }`, agent)
			resp = connectPost(t, addr, "/sw4rm.registry.RegistryService/Heartbeat", "application/json", spaced, agent, key, heartbeat, nil)
			assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
			assert.Contains(t, readAll(t, resp.Body), "permission_denied")

			var gz bytes.Buffer
			zw := gzip.NewWriter(&gz)
			_, _ = zw.Write(heartbeat)
			require.NoError(t, zw.Close())
			resp = connectPost(t, addr, "/sw4rm.registry.RegistryService/Heartbeat", "application/json", gz.Bytes(), agent, key, heartbeat, map[string]string{"Content-Encoding": "gzip"})
			assert.Equal(t, http.StatusOK, resp.StatusCode, "a gzip body is signed as its uncompressed bytes: %s", readAll(t, resp.Body))

			stream := fmt.Appendf(nil, `{"agent_id":%q}`, agent)
			resp = connectPost(t, addr, "/sw4rm.router.RouterService/StreamIncoming", "application/connect+json", envelope(stream), agent, key, stream, nil)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			head := make([]byte, 5)
			_, err = io.ReadFull(resp.Body, head)
			require.NoError(t, err)
			require.Equal(t, byte(0), head[0], "a message, not the end of the stream")
			item := make([]byte, binary.BigEndian.Uint32(head[1:]))
			_, err = io.ReadFull(resp.Body, item)
			require.NoError(t, err)
			assert.JSONEq(t, `{"msg": null, "seq": "0"}`, string(item), "an empty keep-alive item")
		})
	}
}

// TestMalformedJSONOverHTTP1: a JSON request that does not decode gets the error table's
// answer over Connect as over gRPC (a malformed protobuf request): invalid_argument, a
// validation_error message and the sw4rm-error-code metadata — for a unary call and for a
// stream.
func TestMalformedJSONOverHTTP1(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			sys := start(t, newConfig(t, kind))
			addr := sys.app.GRPCAddr()
			resp := connectPost(t, addr, "/sw4rm.router.RouterService/SendMessage", "application/json", []byte(`{"msg":{"message_id":`), "", nil, nil, nil)
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
			assert.Equal(t, "VALIDATION_ERROR", resp.Header.Get("Sw4rm-Error-Code"))
			var e struct{ Code, Message string }
			require.NoError(t, json.Unmarshal([]byte(readAll(t, resp.Body)), &e))
			assert.Equal(t, "invalid_argument", e.Code)
			assert.Contains(t, e.Message, "validation_error: the request is not valid JSON for sw4rm.router.SendMessageRequest")

			resp = connectPost(t, addr, "/sw4rm.router.RouterService/StreamIncoming", "application/connect+json", envelope([]byte(`{"agent_id": 7}`)), "", nil, nil, nil)
			require.Equal(t, http.StatusOK, resp.StatusCode, "a Connect stream's error is its end message")
			body := []byte(readAll(t, resp.Body))
			require.GreaterOrEqual(t, len(body), 5)
			assert.Equal(t, byte(2), body[0], "the end-of-stream message")
			var end struct {
				Error    struct{ Code, Message string }
				Metadata map[string][]string
			}
			require.NoError(t, json.Unmarshal(body[5:], &end))
			assert.Equal(t, "invalid_argument", end.Error.Code)
			assert.Contains(t, end.Error.Message, "validation_error")
			assert.Equal(t, []string{"VALIDATION_ERROR"}, http.Header(end.Metadata).Values("Sw4rm-Error-Code"))
		})
	}
}

// grpcWebFrames reads gRPC-Web frames from r: each message frame's payload goes to msgs,
// and the trailer frame (flag 0x80) ends the reading with its text.
func grpcWebFrames(r io.Reader, msgs chan<- []byte) (trailer string, err error) {
	defer close(msgs)
	head := make([]byte, 5)
	for {
		if _, err := io.ReadFull(r, head); err != nil {
			return "", err
		}
		body := make([]byte, binary.BigEndian.Uint32(head[1:]))
		if _, err := io.ReadFull(r, body); err != nil {
			return "", err
		}
		if head[0]&0x80 != 0 {
			return string(body), nil
		}
		msgs <- body
	}
}

// TestGRPCWebStreamOverHTTP1: StreamIncoming over gRPC-Web on HTTP/1.1 (a browser's
// grpc-web client) delivers in order what another agent sends, and a second stream opened with sw4rm-resume-after gets what the first delivered but
// nobody confirmed after that seq — and nothing before it.
func TestGRPCWebStreamOverHTTP1(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, newConfig(t, kind))
			a := dialAgent(t, sys, "a")
			b := dialAgent(t, sys, "b") // b streams only over gRPC-Web
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			open := func(resumeAfter int64) (<-chan []byte, func()) {
				req, err := proto.Marshal(&routerpb.StreamRequest{AgentId: b.ID()})
				require.NoError(t, err)
				sctx, stop := context.WithCancel(ctx)
				hr, err := http.NewRequestWithContext(sctx, http.MethodPost, "http://"+sys.app.GRPCAddr()+routerpb.RouterService_StreamIncoming_FullMethodName, bytes.NewReader(envelope(req)))
				require.NoError(t, err)
				hr.Header.Set("Content-Type", "application/grpc-web+proto")
				hr.Header.Set("X-Grpc-Web", "1")
				if resumeAfter > 0 {
					hr.Header.Set(wire.ResumeAfterKey, strconv.FormatInt(resumeAfter, 10))
				}
				resp, err := (&http.Client{Transport: &http.Transport{ForceAttemptHTTP2: false}}).Do(hr)
				require.NoError(t, err)
				require.Equal(t, "HTTP/1.1", resp.Proto)
				require.Equal(t, http.StatusOK, resp.StatusCode)
				msgs := make(chan []byte, 16)
				go func() { _, _ = grpcWebFrames(resp.Body, msgs) }()
				return msgs, func() { stop(); _ = resp.Body.Close() }
			}
			next := func(msgs <-chan []byte) *routerpb.StreamItem {
				for {
					select {
					case body, ok := <-msgs:
						require.True(t, ok, "the stream ended")
						var item routerpb.StreamItem
						require.NoError(t, proto.Unmarshal(body, &item))
						// Keep-alives and the registry's notifications pass.
						if item.GetMsg().GetMessageType() == commonpb.MessageType_DATA {
							return &item
						}
					case <-ctx.Done():
						t.Fatal("no delivery")
					}
				}
			}

			msgs, stop := open(0)
			var sent []string
			for i := range 3 {
				env, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: fmt.Appendf(nil, `{"n":%d}`, i)})
				require.NoError(t, err)
				sent = append(sent, env.GetMessageId())
			}
			var items []*routerpb.StreamItem
			for range sent {
				items = append(items, next(msgs))
			}
			for i, it := range items {
				assert.Equal(t, sent[i], it.GetMsg().GetMessageId(), "in order")
			}
			stop() // cut, nothing confirmed

			msgs, stop = open(items[0].GetSeq())
			defer stop()
			assert.Equal(t, sent[1], next(msgs).GetMsg().GetMessageId(), "resumed after the first")
			assert.Equal(t, sent[2], next(msgs).GetMsg().GetMessageId())
		})
	}
}
