// Package console is SW4RM's operator console: server-rendered pages on the HTTP port
// (SW4RM_HTTP_ADDR, under /console/) for the approvals inbox (§15), the agents, tasks and DAG
// runs, dead letters, and negotiations.
//
// The console is a thin client of the frontend, like the sw4rm CLI: every page reads and
// every action acts through the frontend's own gRPC services, over an in-process connection,
// with the signed-in operator's token and the door "web" (wire.ClientConsole). So the
// console's operator is authenticated, authorized and audited exactly as on the gRPC and CLI
// doors, and the console holds no rule of its own about who may do what.
//
// The browser holds only a session cookie (HttpOnly, SameSite=Strict, Secure under TLS);
// the operator's token stays in the server's memory. Pages are html/template with a vendored,
// pinned htmx for partial updates and Server-Sent Events for live changes; every form also
// works without JavaScript. Cross-origin requests are refused (http.CrossOriginProtection),
// and a strict Content-Security-Policy forbids inline script.
package console

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

// Prefix is the path the console is served under on the HTTP port.
const Prefix = "/console/"

//go:embed templates static
var files embed.FS

// Config is what the console needs.
type Config struct {
	// Conn reaches the frontend's gRPC services (an in-process connection in sw4rm).
	Conn grpc.ClientConnInterface
	// OperatorName returns the name of the operator whose token this is, for the pages'
	// header; the frontend, not this, decides what the token may do.
	OperatorName func(token string) (string, bool)
	// AuthOff is SW4RM_AUTH=off: the console says so in a banner.
	AuthOff bool
	// TLS is whether the HTTP port speaks TLS: the session cookie is then Secure.
	TLS bool
	// TemporalUI is the Temporal UI's base URL (e.g. http://localhost:8233), for links to
	// runs; empty shows no links.
	TemporalUI string
	// Namespace is the Temporal namespace the runs are in.
	Namespace string
	// SessionTTL is how long a session lasts after sign-in; zero means DefaultSessionTTL.
	SessionTTL time.Duration
	// Log receives the console's own warnings.
	Log *slog.Logger
	// Now is the clock (time.Now if nil).
	Now func() time.Time
}

// DefaultSessionTTL is how long a console session lasts after sign-in.
const DefaultSessionTTL = 12 * time.Hour

// Console serves the operator console.
type Console struct {
	cfg      Config
	sessions *sessions
	pages    *pages
	mux      *http.ServeMux
}

// New builds the console.
func New(cfg Config) (*Console, error) {
	if cfg.Conn == nil {
		return nil, fmt.Errorf("console: no connection to the frontend")
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	p, err := parsePages()
	if err != nil {
		return nil, err
	}
	c := &Console{cfg: cfg, sessions: newSessions(cfg.Now, cfg.SessionTTL), pages: p, mux: http.NewServeMux()}
	static, err := fs.Sub(files, "static")
	if err != nil {
		return nil, err
	}
	c.mux.Handle("GET "+Prefix+"static/", http.StripPrefix(Prefix+"static/", staticHandler(static)))
	c.mux.HandleFunc("GET "+Prefix+"login", c.loginPage)
	c.mux.HandleFunc("POST "+Prefix+"login", c.login)
	c.mux.HandleFunc("POST "+Prefix+"logout", c.logout)
	c.mux.Handle("GET "+Prefix+"{$}", c.signedIn(func(w http.ResponseWriter, r *http.Request, _ *session) {
		http.Redirect(w, r, Prefix+"inbox", http.StatusSeeOther)
	}))
	// Each page registers its own routes (inbox.go, agents.go, runs.go, deadletters.go,
	// negotiations.go).
	c.inboxRoutes()
	c.agentsRoutes()
	c.runsRoutes()
	c.deadLettersRoutes()
	c.negotiationsRoutes()
	return c, nil
}

// Handler is the console's handler, for Prefix on the HTTP port: the security headers on
// every answer, and cross-origin requests refused before any page runs.
func (c *Console) Handler() http.Handler {
	protect := http.NewCrossOriginProtection()
	protect.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
	}))
	return securityHeaders(protect.Handler(c.mux))
}

// securityHeaders sets the headers every console answer carries: a strict
// Content-Security-Policy (scripts and styles only from the console's own files, no inline
// script, no framing), no MIME sniffing, no referrer, no caching of pages.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
			"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
		h.ServeHTTP(w, r)
	})
}

// staticHandler serves the console's embedded files, cacheable: their names carry versions
// or change with the binary.
func staticHandler(fsys fs.FS) http.Handler {
	files := http.FileServerFS(fsys)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(w, r)
	})
}

// outgoing is the context of a call to the frontend made for the operator of s: their
// token, and the door "web".
func outgoing(ctx context.Context, s *session) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+s.token, wire.ClientKey, wire.ClientConsole)
}

// TemporalRunURL is the Temporal UI's page of the workflow with the given ID, or "" when no
// Temporal UI is configured.
func (c *Console) TemporalRunURL(workflowID string) string {
	if c.cfg.TemporalUI == "" {
		return ""
	}
	ns := c.cfg.Namespace
	if ns == "" {
		ns = "default"
	}
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s", c.cfg.TemporalUI, ns, urlPathEscape(workflowID))
}
