package console

import "net/http"

// runsRoutes registers the Tasks and DAG runs pages.
func (c *Console) runsRoutes() {
	c.mux.Handle("GET "+Prefix+"tasks", c.signedIn(func(w http.ResponseWriter, r *http.Request, s *session) {
		c.render(w, r, s, "tasks", pageData{Title: "Tasks", Nav: "tasks"})
	}))
	c.mux.Handle("GET "+Prefix+"dag", c.signedIn(func(w http.ResponseWriter, r *http.Request, s *session) {
		c.render(w, r, s, "dag", pageData{Title: "DAG runs", Nav: "dag"})
	}))
}
