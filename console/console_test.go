package console

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sw4rm/sw4rm-temporal/proto/hitladminpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

// operators is a HitlAdminService that knows one operator token, as the frontend's does, and
// remembers the door the last call named.
type operators struct {
	hitladminpb.UnimplementedHitlAdminServiceServer
	token string
	door  chan string
}

func (o *operators) ListInvocations(ctx context.Context, _ *hitladminpb.ListInvocationsRequest) (*hitladminpb.ListInvocationsResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get(wire.ClientKey)) > 0 {
		select {
		case o.door <- md.Get(wire.ClientKey)[0]:
		default:
		}
	}
	if got := md.Get("authorization"); len(got) == 0 || got[0] != "Bearer "+o.token {
		return nil, status.Error(codes.Unauthenticated, "permission_denied: not an operator")
	}
	return &hitladminpb.ListInvocationsResponse{}, nil
}

// newTestConsole is a console over a fake frontend that accepts token, with TLS set as given.
func newTestConsole(t *testing.T, token string, tls bool) (*Console, *operators) {
	t.Helper()
	lis := bufconn.Listen(1 << 16)
	g := grpc.NewServer()
	ops := &operators{token: token, door: make(chan string, 1)}
	hitladminpb.RegisterHitlAdminServiceServer(g, ops)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient("passthrough:///test",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	c, err := New(Config{Conn: conn, TLS: tls, SessionTTL: time.Hour,
		OperatorName: func(tok string) (string, bool) { return "ops", tok == token }})
	require.NoError(t, err)
	return c, ops
}

// signIn posts the sign-in form to c and returns the answer.
func signIn(t *testing.T, h http.Handler, token string) *http.Response {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "https://console.example"+Prefix+"login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

// TestSessionCookieUnderTLS: with TLS the session cookie is Secure as well as HttpOnly and
// SameSite=Strict, scoped to the console; without TLS it cannot be Secure (the browser would
// drop it). The token checked at sign-in goes to the frontend with the door "web".
func TestSessionCookieUnderTLS(t *testing.T) {
	for _, tls := range []bool{true, false} {
		c, ops := newTestConsole(t, "tok", tls)
		resp := signIn(t, c.Handler(), "tok")
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		assert.Equal(t, wire.ClientConsole, <-ops.door)
		require.Len(t, resp.Cookies(), 1)
		ck := resp.Cookies()[0]
		assert.Equal(t, tls, ck.Secure, "Secure exactly when TLS")
		assert.True(t, ck.HttpOnly)
		assert.Equal(t, http.SameSiteStrictMode, ck.SameSite)
		assert.Equal(t, Prefix, ck.Path)
	}
}

// TestSignInRefusals: a token the frontend refuses gets 401 and no cookie; an empty one 400.
func TestSignInRefusals(t *testing.T) {
	c, _ := newTestConsole(t, "tok", false)
	resp := signIn(t, c.Handler(), "wrong")
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Empty(t, resp.Cookies())
	resp = signIn(t, c.Handler(), "")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

// TestSafeNext: after signing in the console goes only to its own pages, never to another
// site named in ?next=.
func TestSafeNext(t *testing.T) {
	for next, want := range map[string]string{
		Prefix + "agents":               Prefix + "agents",
		"https://evil.example/":         Prefix + "inbox",
		"//evil.example/console/":       Prefix + "inbox",
		Prefix + "inbox\r\nSet-Cookie:": Prefix + "inbox",
		"":                              Prefix + "inbox",
	} {
		assert.Equal(t, want, safeNext(next), next)
	}
}

// TestSessionsExpire: a session past its time is gone.
func TestSessionsExpire(t *testing.T) {
	now := time.Now()
	s := newSessions(func() time.Time { return now }, time.Minute)
	ss := s.create("tok", "ops")
	_, ok := s.get(ss.id)
	assert.True(t, ok)
	now = now.Add(2 * time.Minute)
	_, ok = s.get(ss.id)
	assert.False(t, ok)
}
