package console

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/hitladminpb"
)

// cookieName is the session cookie's name.
const cookieName = "sw4rm_console"

// session is one operator signed in. The token never leaves the server.
type session struct {
	id       string
	token    string
	operator string
	expires  time.Time
}

// sessions are the console's sessions, in this process's memory: signing in again after a
// restart, or on another server behind a load balancer without session affinity, is the
// price of never writing an operator's token anywhere.
type sessions struct {
	mu  sync.Mutex
	m   map[string]*session
	now func() time.Time
	ttl time.Duration
}

func newSessions(now func() time.Time, ttl time.Duration) *sessions {
	return &sessions{m: map[string]*session{}, now: now, ttl: ttl}
}

// create starts a session for the operator holding token.
func (s *sessions) create(token, operator string) *session {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand never fails on Linux; a failure panics in the runtime
	ss := &session{id: base64.RawURLEncoding.EncodeToString(b), token: token, operator: operator, expires: s.now().Add(s.ttl)}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, old := range s.m {
		if !s.now().Before(old.expires) {
			delete(s.m, id)
		}
	}
	s.m[ss.id] = ss
	return ss
}

// get returns the live session with this id.
func (s *sessions) get(id string) (*session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.m[id]
	if !ok || !s.now().Before(ss.expires) {
		delete(s.m, id)
		return nil, false
	}
	return ss, true
}

// end ends the session with this id.
func (s *sessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

// sessionOf returns the request's session, if it has a live one.
func (c *Console) sessionOf(r *http.Request) (*session, bool) {
	ck, err := r.Cookie(cookieName)
	if err != nil || ck.Value == "" {
		return nil, false
	}
	return c.sessions.get(ck.Value)
}

// signedIn serves h to a request with a session; without one, a page is sent to the sign-in
// page and anything else (an htmx fragment, a form's POST, the event stream) is refused with
// 401, so that nothing acts without an operator.
func (c *Console) signedIn(h func(http.ResponseWriter, *http.Request, *session)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, ok := c.sessionOf(r)
		if !ok {
			if r.Method == http.MethodGet && r.Header.Get("HX-Request") == "" && !strings.HasSuffix(r.URL.Path, "/events") {
				http.Redirect(w, r, Prefix+"login?next="+urlQueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			http.Error(w, "sign in first", http.StatusUnauthorized)
			return
		}
		h(w, r, s)
	})
}

// loginPage shows the sign-in form.
func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, nil, "login", pageData{Title: "Sign in", Data: loginData{Next: safeNext(r.URL.Query().Get("next"))}})
}

// loginData is what the sign-in page shows.
type loginData struct {
	Next  string
	Error string
}

// login checks the operator's token through the frontend, as any operator call is checked
// (HitlAdminService refuses a token that is not an operator's), and starts a session.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	token := strings.TrimSpace(r.PostFormValue("token"))
	next := safeNext(r.PostFormValue("next"))
	fail := func(msg string, code int) {
		w.WriteHeader(code)
		c.render(w, r, nil, "login", pageData{Title: "Sign in", Data: loginData{Next: next, Error: msg}})
	}
	if token == "" {
		fail("Enter your operator token.", http.StatusBadRequest)
		return
	}
	probe := &session{token: token}
	_, err := hitladminpb.NewHitlAdminServiceClient(c.cfg.Conn).ListInvocations(outgoing(r.Context(), probe), &hitladminpb.ListInvocationsRequest{Limit: 1})
	if err != nil {
		if c := status.Code(err); c == codes.Unauthenticated || c == codes.PermissionDenied {
			fail("That token is not an operator's.", http.StatusUnauthorized)
			return
		}
		fail("The server could not check the token: "+status.Convert(err).Message(), http.StatusServiceUnavailable)
		return
	}
	name := "operator"
	if c.cfg.OperatorName != nil {
		if n, ok := c.cfg.OperatorName(token); ok {
			name = n
		}
	}
	s := c.sessions.create(token, name)
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: s.id, Path: Prefix, HttpOnly: true, Secure: c.cfg.TLS,
		SameSite: http.SameSiteStrictMode, Expires: s.expires})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout ends the session.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if s, ok := c.sessionOf(r); ok {
		c.sessions.end(s.id)
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: Prefix, HttpOnly: true, Secure: c.cfg.TLS,
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
}

// safeNext is where to go after signing in: a console path, never another site.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return Prefix + "inbox"
	}
	return next
}

// errNoSession is what a page's call reports when the frontend no longer accepts the token.
var errNoSession = errors.New("the session's token is no longer accepted: sign in again")
