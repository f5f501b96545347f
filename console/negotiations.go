package console

import "net/http"

// negotiationsRoutes registers the Negotiations page.
func (c *Console) negotiationsRoutes() {
	c.mux.Handle("GET "+Prefix+"negotiations", c.signedIn(func(w http.ResponseWriter, r *http.Request, s *session) {
		c.render(w, r, s, "negotiations", pageData{Title: "Negotiations", Nav: "negotiations"})
	}))
}
