package console

import "net/http"

// inboxRoutes registers the Approvals page.
func (c *Console) inboxRoutes() {
	c.mux.Handle("GET "+Prefix+"inbox", c.signedIn(func(w http.ResponseWriter, r *http.Request, s *session) {
		c.render(w, r, s, "inbox", pageData{Title: "Approvals", Nav: "inbox"})
	}))
}
