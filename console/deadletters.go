package console

import "net/http"

// deadLettersRoutes registers the Dead letters page.
func (c *Console) deadLettersRoutes() {
	c.mux.Handle("GET "+Prefix+"dead-letters", c.signedIn(func(w http.ResponseWriter, r *http.Request, s *session) {
		c.render(w, r, s, "deadletters", pageData{Title: "Dead letters", Nav: "dead-letters"})
	}))
}
