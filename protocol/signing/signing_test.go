package signing

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/sw4rm/sw4rm-temporal/proto/registrypb" // the complete call's request type
	_ "github.com/sw4rm/sw4rm-temporal/proto/routerpb"   // the streaming call's request type
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

type vector struct {
	Seed      string `json:"seed_hex"`
	Public    string `json:"public_key_hex"`
	Method    string `json:"method"`
	AgentID   string `json:"agent_id"`
	Timestamp int64  `json:"timestamp_ms"`
	Nonce     string `json:"nonce"`
	Body      string `json:"body_hex"`
	Preimage  string `json:"preimage"`
	Signature string `json:"signature_b64url"`
	// A complete call also gives the request it encodes, its gRPC frame and its metadata.
	Request *struct {
		Type   string          `json:"type"`
		Fields json.RawMessage `json:"fields"`
	} `json:"request"`
	Frame    string            `json:"grpc_frame_hex"`
	Metadata map[string]string `json:"metadata"`
	// A call over Connect or gRPC-Web gives its content type, the JSON it sends, the type of
	// message that JSON is, and the HTTP request body (body_hex is the part the digest covers).
	Protocol    string `json:"protocol"`
	ContentType string `json:"content_type"`
	MessageType string `json:"message_type"`
	JSON        string `json:"json"`
	HTTPBody    string `json:"http_body_hex"`
}

func decodeHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	require.NoError(t, err)
	return b
}

// TestVectors: the published vectors, which another language's signer reproduces, are what
// this package computes and accepts.
func TestVectors(t *testing.T) {
	raw, err := os.ReadFile("testdata/vectors.json")
	require.NoError(t, err)
	var vs []vector
	require.NoError(t, json.Unmarshal(raw, &vs))
	require.NotEmpty(t, vs)
	complete, overHTTP := 0, 0
	for _, v := range vs {
		priv := ed25519.NewKeyFromSeed(decodeHex(t, v.Seed))
		pub := priv.Public().(ed25519.PublicKey)
		require.Equal(t, v.Public, hex.EncodeToString(pub))
		c := Call{Method: v.Method, AgentID: v.AgentID, Timestamp: time.UnixMilli(v.Timestamp), Nonce: v.Nonce, Body: decodeHex(t, v.Body)}
		require.Equal(t, v.Preimage, string(Preimage(c)))
		md := Sign(priv, c)
		require.Equal(t, v.Signature, md[wire.SignatureKey])
		parsed, sig, err := Parse(func(k string) string { return md[k] })
		require.NoError(t, err)
		parsed.Method, parsed.Body = c.Method, c.Body
		require.NoError(t, Verify(pub, parsed, sig))
		if v.Request != nil {
			complete++
			checkCompleteCall(t, v, c.Body, md)
		}
		if v.Protocol != "" {
			overHTTP++
			checkHTTPCall(t, v, c.Body, md)
		}
	}
	require.NotZero(t, complete, "the vectors include a complete call")
	require.NotZero(t, overHTTP, "the vectors include a call over Connect")
}

// checkHTTPCall: a Connect vector's body is its JSON as sent, a valid message of its type
// whose protobuf encoding is other bytes (so a server that re-encoded would hash those); its
// HTTP body is that JSON, enveloped behind the 5-byte prefix when the content type is a
// streaming one; and its metadata, sent as HTTP headers, is what Sign returns.
func checkHTTPCall(t *testing.T, v vector, body []byte, md map[string]string) {
	t.Helper()
	require.Equal(t, v.JSON, string(body), "body_hex is the JSON's bytes")
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(v.MessageType))
	require.NoError(t, err, v.MessageType)
	msg := mt.New().Interface()
	require.NoError(t, protojson.Unmarshal(body, msg))
	encoded, err := proto.Marshal(msg)
	require.NoError(t, err)
	require.NotEqual(t, body, encoded, "the JSON is not the protobuf encoding")
	want := body
	if v.ContentType == "application/connect+json" || v.ContentType == "application/grpc-web+json" {
		want = append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(body))), body...)
	} else {
		require.Equal(t, "application/json", v.ContentType)
	}
	require.Equal(t, hex.EncodeToString(want), v.HTTPBody)
	require.Equal(t, md, v.Metadata)
}

// checkCompleteCall: a complete-call vector's body is the protobuf encoding of its request,
// its frame is the body behind gRPC's 5-byte prefix, and its metadata is what Sign returns.
func checkCompleteCall(t *testing.T, v vector, body []byte, md map[string]string) {
	t.Helper()
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(v.Request.Type))
	require.NoError(t, err, v.Request.Type)
	msg := mt.New().Interface()
	require.NoError(t, protojson.Unmarshal(v.Request.Fields, msg))
	encoded, err := proto.Marshal(msg)
	require.NoError(t, err)
	require.Equal(t, hex.EncodeToString(encoded), v.Body, "body_hex encodes the request")
	frame := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(body)))
	require.Equal(t, hex.EncodeToString(append(frame, body...)), v.Frame)
	require.Equal(t, md, v.Metadata)
}

func signed(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey, Call, map[string]string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	c := Call{Method: "/sw4rm.registry.RegistryService/Heartbeat", AgentID: "a", Timestamp: time.UnixMilli(1767225600123), Nonce: "abcdefghijklmnop", Body: []byte{1, 2, 3}}
	return pub, priv, c, Sign(priv, c)
}

// TestTamperingIsRefused: changing anything the signature covers, or signing with another
// key, fails verification.
func TestTamperingIsRefused(t *testing.T) {
	pub, _, c, md := signed(t)
	sig, err := base64.RawURLEncoding.DecodeString(md[wire.SignatureKey])
	require.NoError(t, err)
	require.NoError(t, Verify(pub, c, sig))
	for name, mutate := range map[string]func(*Call){
		"method":    func(c *Call) { c.Method = "/sw4rm.registry.RegistryService/DeregisterAgent" },
		"agent":     func(c *Call) { c.AgentID = "b" },
		"timestamp": func(c *Call) { c.Timestamp = c.Timestamp.Add(time.Millisecond) },
		"nonce":     func(c *Call) { c.Nonce = "abcdefghijklmnoq" },
		"body":      func(c *Call) { c.Body = []byte{1, 2, 4} },
	} {
		tc := c
		mutate(&tc)
		require.ErrorIs(t, Verify(pub, tc, sig), ErrBadSignature, name)
	}
	other, _, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	require.ErrorIs(t, Verify(other, c, sig), ErrBadSignature)
	require.ErrorIs(t, Verify([]byte("short"), c, sig), ErrBadSignature)
}

func TestParse(t *testing.T) {
	_, _, _, md := signed(t)
	get := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	_, _, err := Parse(get(map[string]string{}))
	require.ErrorIs(t, err, ErrUnsigned)
	for key, bad := range map[string]string{
		wire.SignatureAgentKey: "", wire.SignatureTimestampKey: "yesterday", wire.SignatureNonceKey: "short", wire.SignatureKey: "not base64!",
	} {
		m := map[string]string{}
		for k, v := range md {
			m[k] = v
		}
		m[key] = bad
		_, _, err := Parse(get(m))
		require.ErrorIs(t, err, ErrMalformed, key)
	}
	m := map[string]string{}
	for k, v := range md {
		m[k] = v
	}
	m[wire.SignatureNonceKey] = "abcdefghijklmno/"
	_, _, err = Parse(get(m))
	require.ErrorIs(t, err, ErrMalformed, "a nonce outside the alphabet")
}

// TestReplayGuard: a call outside the clock skew is stale; the same nonce twice within the
// window is a replay, even concurrently; another agent's identical nonce is not.
func TestReplayGuard(t *testing.T) {
	g := &ReplayGuard{Skew: 30 * time.Second}
	now := time.UnixMilli(1767225600000)
	c := Call{AgentID: "a", Nonce: "abcdefghijklmnop", Timestamp: now.Add(-10 * time.Second)}
	require.NoError(t, g.Check(c, now))
	require.ErrorIs(t, g.Check(c, now.Add(5*time.Second)), ErrReplayed)
	other := c
	other.AgentID = "b"
	require.NoError(t, g.Check(other, now))
	old := Call{AgentID: "a", Nonce: "0000000000000000", Timestamp: now.Add(-31 * time.Second)}
	require.ErrorIs(t, g.Check(old, now), ErrStale)
	future := Call{AgentID: "a", Nonce: "1111111111111111", Timestamp: now.Add(31 * time.Second)}
	require.ErrorIs(t, g.Check(future, now), ErrStale)

	// Concurrent replays: exactly one is admitted.
	fresh := Call{AgentID: "c", Nonce: "zzzzzzzzzzzzzzzz", Timestamp: now}
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		oks int
	)
	for range 16 {
		wg.Go(func() {
			if g.Check(fresh, now) == nil {
				mu.Lock()
				oks++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Equal(t, 1, oks)

	// Long after, the nonce is forgotten — and its timestamp is stale anyway.
	later := now.Add(5 * time.Minute)
	require.ErrorIs(t, g.Check(c, later), ErrStale)
	require.NotContains(t, g.seen, "a\x00abcdefghijklmnop", "swept once it no longer matters")
}
