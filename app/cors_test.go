package app

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// corsCall sends a request with an Origin header to the gRPC port and returns the response.
func corsCall(t *testing.T, method, url, origin string, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set("Origin", origin)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http1Client(nil).Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// TestCORSOrigins: with SW4RM_CORS_ORIGINS a page of a listed origin may call the port from a
// browser — its preflight is answered, echoing the sw4rm-* and Authorization headers it asks
// for, and the call's response lets it read every header — and a page of another origin is
// not; without the setting the port sends no CORS header at all.
func TestCORSOrigins(t *testing.T) {
	cfg := DefaultConfig()
	cfg.CORSOrigins = "https://app.example, http://localhost:3000"
	a, _ := serveForTest(t, cfg)
	check := "http://" + a.GRPCAddr() + "/grpc.health.v1.Health/Check"
	preflight := map[string]string{
		"Access-Control-Request-Method":  "POST",
		"Access-Control-Request-Headers": "content-type,connect-protocol-version,sw4rm-signature,authorization",
	}

	resp := corsCall(t, http.MethodOptions, check, "https://app.example", preflight)
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
	assert.Equal(t, "https://app.example", resp.Header.Get("Access-Control-Allow-Origin"))
	assert.Contains(t, resp.Header.Get("Access-Control-Allow-Headers"), "sw4rm-signature")
	assert.Contains(t, resp.Header.Get("Access-Control-Allow-Headers"), "authorization")
	assert.Empty(t, resp.Header.Get("Access-Control-Allow-Credentials"))

	resp = corsCall(t, http.MethodOptions, check, "https://evil.example", preflight)
	assert.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"), "an origin not listed")

	connect := map[string]string{"Content-Type": "application/json", "Connect-Protocol-Version": "1"}
	resp = corsCall(t, http.MethodPost, check, "http://localhost:3000", connect)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "http://localhost:3000", resp.Header.Get("Access-Control-Allow-Origin"))
	assert.Contains(t, resp.Header.Get("Access-Control-Expose-Headers"), "*")

	b, _ := serveForTest(t, DefaultConfig())
	resp = corsCall(t, http.MethodPost, "http://"+b.GRPCAddr()+"/grpc.health.v1.Health/Check", "https://app.example", connect)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "a call without CORS is still served (curl, servers)")
	assert.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"), "no origin is allowed by default")
}

// TestCORSOriginsRefusesNonOrigins: an entry that is not a web origin stops the process.
func TestCORSOriginsRefusesNonOrigins(t *testing.T) {
	for _, bad := range []string{"app.example", "https://app.example/path", "ftp://app.example", "https://"} {
		cfg := DefaultConfig()
		cfg.CORSOrigins = bad
		_, err := cfg.Resolve()
		assert.ErrorContains(t, err, "SW4RM_CORS_ORIGINS", bad)
	}
	cfg := DefaultConfig()
	cfg.CORSOrigins = "*"
	_, err := cfg.Resolve()
	assert.NoError(t, err)
}
