package mcp

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Progress is one progress notification of a running call (MCP's notifications/progress),
// as the JSON of a frame: {"progress":..,"total":..,"message":..}, total and message left
// out when the server gave none.
type Progress struct {
	// Progress is the progress so far; it grows with every notification.
	Progress float64 `json:"progress"`
	// Total is what Progress counts up to; 0 when unknown.
	Total float64 `json:"total,omitempty"`
	// Message describes the progress for a person.
	Message string `json:"message,omitempty"`
}

// progressRoutes hands progress notifications to the calls that asked for them, by progress
// token. The zero value is ready.
type progressRoutes struct {
	mu     sync.Mutex
	last   int64
	routes map[string]func(Progress)
}

// add registers f under a fresh token and returns the token.
func (pr *progressRoutes) add(f func(Progress)) string {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.routes == nil {
		pr.routes = map[string]func(Progress){}
	}
	pr.last++
	// A string token: JSON numbers come back as float64, strings as they were sent.
	t := "sw4rm-" + strconv.FormatInt(pr.last, 10)
	pr.routes[t] = f
	return t
}

func (pr *progressRoutes) remove(token string) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	delete(pr.routes, token)
}

// deliver hands a progress notification to the call that asked for it. A token no call is
// waiting for — a call that already returned, or a server that made one up — is dropped.
func (pr *progressRoutes) deliver(p *sdk.ProgressNotificationParams) {
	token, ok := p.ProgressToken.(string)
	if !ok {
		return
	}
	// f runs under the lock, so that once remove returns f is not running and never will:
	// nothing reaches a call after it returned.
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if f := pr.routes[token]; f != nil {
		f(Progress{Progress: p.Progress, Total: p.Total, Message: p.Message})
	}
}

// handle is deliver as the SDK's ProgressNotificationHandler.
func (pr *progressRoutes) handle(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
	pr.deliver(req.Params)
}

// progressTransport hands a session's progress notifications to their calls as the reading
// goroutine reads them, in wire order. The SDK's own progress handler runs on another
// goroutine than the one that delivers a call's result, so a notification the server sent
// just before the result could reach the handler after the call returned, and be lost;
// here every notification that came before the result on the wire is delivered before the
// call sees the result.
type progressTransport struct {
	sdk.Transport
	routes *progressRoutes
}

// Connect wraps the connection the inner transport makes.
func (t *progressTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &progressConn{Connection: c, routes: t.routes}, nil
}

// progressConn is a connection whose reads deliver progress notifications on the way.
type progressConn struct {
	sdk.Connection
	routes *progressRoutes
}

// Read reads the next message and, when it is a progress notification, delivers it first;
// the message still goes on to the SDK.
func (c *progressConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if r, ok := m.(*jsonrpc.Request); ok && err == nil && !r.ID.IsValid() && r.Method == "notifications/progress" {
		var p sdk.ProgressNotificationParams
		if json.Unmarshal(r.Params, &p) == nil {
			c.routes.deliver(&p)
		}
	}
	return m, err
}
