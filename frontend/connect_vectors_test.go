package frontend

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestWireDigestOfPublishedVectors: for each published vector of a call over Connect
// (docs/signing.md, "Over Connect and gRPC-Web"), the digest the server's interceptors are
// handed for the HTTP request is the one in the vector's pre-image — the hash of the JSON as
// sent, not of the protobuf vanguard makes of it.
func TestWireDigestOfPublishedVectors(t *testing.T) {
	raw, err := os.ReadFile("../protocol/signing/testdata/vectors.json")
	require.NoError(t, err)
	var vs []struct {
		Method      string            `json:"method"`
		ContentType string            `json:"content_type"`
		HTTPBody    string            `json:"http_body_hex"`
		Preimage    string            `json:"preimage"`
		Metadata    map[string]string `json:"metadata"`
	}
	require.NoError(t, json.Unmarshal(raw, &vs))

	seen := map[string]string{} // method → digest, as the interceptors saw it
	capture := func(ctx context.Context, method string) error {
		d, ok := wireDigestOf(ctx)
		require.True(t, ok, "%s: a digest of the signed call", method)
		require.NoError(t, d.err)
		seen[method] = hex.EncodeToString(d.digest[:])
		return status.Error(codes.Aborted, "captured")
	}
	g := grpc.NewServer(
		grpc.UnaryInterceptor(func(ctx context.Context, _ any, info *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
			return nil, capture(ctx, info.FullMethod)
		}),
		grpc.StreamInterceptor(func(_ any, ss grpc.ServerStream, info *grpc.StreamServerInfo, _ grpc.StreamHandler) error {
			return capture(ss.Context(), info.FullMethod)
		}),
	)
	New(nil, nil, nil, nil, nil, nil, Config{}).Register(g)
	h, err := HTTPHandler(g, 1<<20)
	require.NoError(t, err)

	checked := map[string]bool{}
	for _, v := range vs {
		if v.ContentType == "" {
			continue
		}
		body, err := hex.DecodeString(v.HTTPBody)
		require.NoError(t, err)
		r := httptest.NewRequest("POST", v.Method, bytes.NewReader(body))
		r.Header.Set("Content-Type", v.ContentType)
		r.Header.Set("Connect-Protocol-Version", "1")
		for k, val := range v.Metadata {
			r.Header.Set(k, val)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		require.Contains(t, w.Body.String(), "captured", "%s reached the interceptor", v.Method)
		lines := strings.Split(strings.TrimSuffix(v.Preimage, "\n"), "\n")
		require.Equal(t, lines[len(lines)-1], seen[v.Method], "%s as %s", v.Method, v.ContentType)
		checked[v.ContentType] = true
	}
	require.True(t, checked["application/json"], "a unary Connect vector")
	require.True(t, checked["application/connect+json"], "a streaming Connect vector")
}
