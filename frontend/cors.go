package frontend

import (
	"fmt"
	"net/http"
	"net/url"

	connectcors "connectrpc.com/cors"
	"github.com/rs/cors"
)

// WithCORS lets pages of the web origins in origins ("*" for any) call h from a browser
// (SW4RM_CORS_ORIGINS): it answers their CORS preflights and lets them read every response
// header and trailer, the sw4rm-* ones included. Connect's own lists (connectrpc.com/cors)
// name the protocol's headers; a request header is allowed whatever its name (the
// preflight's list is echoed), since SW4RM's calls carry many sw4rm-* metadata keys and an
// operator's Authorization. No cookie is involved, so credentials stay off.
func WithCORS(h http.Handler, origins []string) http.Handler {
	return cors.New(cors.Options{
		AllowedOrigins: origins,
		AllowedMethods: connectcors.AllowedMethods(),
		AllowedHeaders: []string{"*"},
		// "*" exposes every header to a request without credentials, as these are; the
		// names before it are Connect's, for a browser that predates the wildcard.
		ExposedHeaders: append(connectcors.ExposedHeaders(), "*"),
		MaxAge:         7200,
	}).Handler(h)
}

// CheckCORSOrigins refuses an entry of SW4RM_CORS_ORIGINS that is neither "*" nor a web
// origin (scheme://host[:port], no path).
func CheckCORSOrigins(origins []string) error {
	for _, o := range origins {
		if o == "*" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return fmt.Errorf("%q is not a web origin: want scheme://host[:port] (http or https), or *", o)
		}
	}
	return nil
}
