package sdk

import (
	"fmt"
	"io"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestHTTP1BrokenStreamIsUnavailable: a stream whose connection broke mid-message (a proxy
// cut it) is Unavailable, which Serve and callers retry, as it is over gRPC; connect-go
// reports it as InvalidArgument ("incomplete envelope"). An InvalidArgument the server sent
// stays InvalidArgument.
func TestHTTP1BrokenStreamIsUnavailable(t *testing.T) {
	cut := connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("protocol error: incomplete envelope: %w", io.ErrUnexpectedEOF))
	assert.Equal(t, codes.Unavailable, status.Code(toStatus(cut)))

	sent := connect.NewWireError(connect.CodeInvalidArgument, fmt.Errorf("validation_error: bad agent_id"))
	assert.Equal(t, codes.InvalidArgument, status.Code(toStatus(sent)))
	assert.Equal(t, "validation_error: bad agent_id", status.Convert(toStatus(sent)).Message())
}
