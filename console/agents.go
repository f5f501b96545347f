package console

import "net/http"

// agentsRoutes registers the Agents page.
func (c *Console) agentsRoutes() {
	c.mux.Handle("GET "+Prefix+"agents", c.signedIn(func(w http.ResponseWriter, r *http.Request, s *session) {
		c.render(w, r, s, "agents", pageData{Title: "Agents", Nav: "agents"})
	}))
}
