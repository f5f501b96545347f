package console

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// pages are the parsed templates: each page is layout.html with its own file, which defines
// "content" (the page's main) and any fragments htmx fetches alone.
type pages struct {
	byName map[string]*template.Template
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"since": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return time.Since(t).Round(time.Second).String() + " ago"
	},
	"until": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		d := time.Until(t).Round(time.Second)
		if d < 0 {
			return "passed " + (-d).String() + " ago"
		}
		return "in " + d.String()
	},
	"rfc3339": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	},
	"prefix": func() string { return Prefix },
}

func parsePages() (*pages, error) {
	layout, err := fs.ReadFile(files, "templates/layout.html")
	if err != nil {
		return nil, err
	}
	names, err := fs.Glob(files, "templates/*.html")
	if err != nil {
		return nil, err
	}
	p := &pages{byName: map[string]*template.Template{}}
	for _, n := range names {
		name := strings.TrimSuffix(path.Base(n), ".html")
		if name == "layout" {
			continue
		}
		body, err := fs.ReadFile(files, n)
		if err != nil {
			return nil, err
		}
		t, err := template.New("layout").Funcs(funcs).Parse(string(layout))
		if err != nil {
			return nil, fmt.Errorf("console: layout.html: %w", err)
		}
		if _, err := t.New(name).Parse(string(body)); err != nil {
			return nil, fmt.Errorf("console: %s: %w", n, err)
		}
		p.byName[name] = t
	}
	return p, nil
}

// pageData is what the layout shows around a page.
type pageData struct {
	// Title is the page's title; Nav the navigation entry it belongs to.
	Title, Nav string
	// Operator is the signed-in operator's name ("" on the sign-in page).
	Operator string
	// AuthOff shows the banner of SW4RM_AUTH=off.
	AuthOff bool
	// Flash is a one-line outcome of the last action, announced to screen readers.
	Flash string
	// Error is a failure to show in place of the page's data.
	Error string
	// Data is the page's own.
	Data any
}

// render writes page name within the layout. s is the session (nil on the sign-in page).
func (c *Console) render(w http.ResponseWriter, r *http.Request, s *session, name string, d pageData) {
	d.AuthOff = c.cfg.AuthOff
	if s != nil {
		d.Operator = s.operator
	}
	c.execute(w, name, "layout", d)
}

// renderFragment writes the block of page name alone, for htmx.
func (c *Console) renderFragment(w http.ResponseWriter, name, block string, d pageData) {
	d.AuthOff = c.cfg.AuthOff
	c.execute(w, name, block, d)
}

func (c *Console) execute(w http.ResponseWriter, name, block string, d pageData) {
	t, ok := c.pages.byName[name]
	if !ok {
		http.Error(w, "no such page", http.StatusInternalServerError)
		return
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, block, d); err != nil {
		c.cfg.Log.Error("console: rendering failed", "page", name, "block", block, "error", err)
		http.Error(w, "the page could not be rendered; the server logged why", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = buf.WriteTo(w)
}

// callError is how a page shows a failed call to the frontend: the status's message, which
// names the error code (validation_error: …, permission_denied: …).
func callError(err error) string {
	st := status.Convert(err)
	if st.Code() == codes.Unauthenticated {
		return errNoSession.Error()
	}
	return st.Message()
}

// httpStatusOf is the HTTP status a failed call to the frontend answers a form with.
func httpStatusOf(err error) int {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.OutOfRange, codes.FailedPrecondition:
		return http.StatusBadRequest
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	}
	return http.StatusBadGateway
}

func urlPathEscape(s string) string  { return url.PathEscape(s) }
func urlQueryEscape(s string) string { return url.QueryEscape(s) }
