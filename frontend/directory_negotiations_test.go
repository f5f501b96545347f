package frontend

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/directorypb"
)

// TestListNegotiationsAuthorization: in required mode only an operator lists negotiations —
// the listing shows every negotiation's drafts and transcript, not the caller's own — and
// an agent or an anonymous caller is refused (the interceptor answers permission_denied).
func TestListNegotiationsAuthorization(t *testing.T) {
	a := NewAuthenticator(AuthConfig{Mode: auth.Required})
	defer a.Close()
	m, req := directorypb.DirectoryService_ListNegotiations_FullMethodName, &directorypb.ListNegotiationsRequest{}
	assert.NoError(t, a.authorize(m, req, auth.Principal{Operator: "ops"}))
	err := a.authorize(m, req, auth.Principal{Agent: "alice", KeyID: "ed25519:00"})
	assert.ErrorContains(t, err, "is for operators")
	assert.Error(t, a.authorize(m, req, auth.Principal{}))
}

// TestListNegotiationsValidation: a bad filter is refused with validation_error before
// Temporal is asked anything.
func TestListNegotiationsValidation(t *testing.T) {
	d, _ := newDirectory(t)
	ctx := readAs(t, auth.Principal{Operator: "ops"})
	for name, req := range map[string]*directorypb.ListNegotiationsRequest{
		"unknown state":      {State: "running"},
		"id with a quote":    {NegotiationId: "x' OR 'a'='a"},
		"limit over maximum": {Limit: 1001},
	} {
		_, err := d.ListNegotiations(ctx, req)
		require.Error(t, err, name)
		requireRefusal(t, err, codes.InvalidArgument, "validation_error")
	}
}
