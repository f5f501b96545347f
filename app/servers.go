package app

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/sw4rm/sw4rm-temporal/frontend"
	"github.com/sw4rm/sw4rm-temporal/protocol/acl"
	"github.com/sw4rm/sw4rm-temporal/telemetry"
	"github.com/sw4rm/sw4rm-temporal/tlsfiles"
)

// ServerTLS is the TLS configuration of the gRPC and HTTP ports that cfg describes, or nil
// for plaintext when no TLS file is set. The certificate is read again when its files change
// (each reload is logged), so rotating it needs no restart; TLSClientCAFile adds mutual TLS.
// Only one of the certificate and key, a client CA alone, or a file that does not load is
// an error that names the settings.
func ServerTLS(cfg Config, log *slog.Logger) (*tls.Config, error) {
	c, err := tlsfiles.ServerConfig(cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSClientCAFile, func(err error) {
		if err != nil {
			log.Warn("TLS certificate files changed but do not load", "error", err)
			return
		}
		log.Info("TLS certificate reloaded", "cert", cfg.TLSCertFile)
	})
	if err != nil {
		return nil, fmt.Errorf("TLS (SW4RM_TLS_CERT_FILE, SW4RM_TLS_KEY_FILE, SW4RM_TLS_CLIENT_CA_FILE): %w", err)
	}
	return c, nil
}

// grpcServerOptions are the options of the gRPC frontend's server: the frontend's codec and
// interceptors with auth (nil: SW4RM_AUTH=off), the message-size bound and keepalives. TLS is
// not among them: the port's listener (portMux) terminates it for every protocol.
func grpcServerOptions(cfg Config, log *slog.Logger, auth *frontend.Authenticator) []grpc.ServerOption {
	return append(frontend.ServerOptions(log, auth),
		// Well above the payload limit, so that oversize payloads reach the router and get
		// oversize_payload, a NACK and a dead letter (§5.4, §21.1) rather than gRPC's own
		// RESOURCE_EXHAUSTED; bounded, so that no request is held in memory unbounded.
		grpc.MaxRecvMsgSize(frontend.MaxRequestBytes(cfg.MaxPayloadBytes)),
		// Long-lived StreamIncoming calls must outlive idle proxies and detect dead agents.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)
}

// serve listens on cfg.GRPCAddr and serves there the gRPC services register adds — as native
// gRPC over HTTP/2, and as Connect and gRPC-Web over HTTP/1.1 and HTTP/2 (§5.1; portMux tells
// them apart) — and, unless cfg.HTTPAddr is empty, serves handler on cfg.HTTPAddr. With
// tlsCfg both ports speak only TLS (mutual TLS when it requires client certificates). Stop
// closes them.
func (a *App) serve(cfg Config, tlsCfg *tls.Config, register func(*grpc.Server), handler http.Handler) error {
	log := a.log
	var err error
	a.grpcLis, err = net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.GRPCAddr, err)
	}
	// The RPC metrics' interceptors come first, the outermost, so they see each call's final
	// status, whichever protocol carried it.
	unary, stream := a.metrics.RPCInterceptors()
	opts := append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream)},
		grpcServerOptions(cfg, log, a.auth)...)
	if telemetry.Enabled() {
		// A span per call, continuing the caller's `traceparent`, but for the router's calls,
		// whose span the router makes; none at all with tracing off.
		opts = append(opts, grpc.StatsHandler(telemetry.ServerHandler(frontend.RouterSpannedCalls...)))
	}
	a.grpc = grpc.NewServer(opts...)
	register(a.grpc)
	a.metrics.RPCMethods(a.grpc.GetServiceInfo())
	connect, err := frontend.HTTPHandler(a.grpc, frontend.MaxRequestBytes(cfg.MaxPayloadBytes))
	if err != nil {
		_ = a.grpcLis.Close()
		return err
	}
	if origins := splitList(cfg.CORSOrigins); len(origins) > 0 {
		connect = frontend.WithCORS(connect, origins)
	}
	if a.inproc != nil {
		go func() { _ = a.grpc.Serve(a.inproc) }()
	}
	mux := newPortMux(a.grpcLis, tlsCfg, log, 0)
	go func() {
		if err := a.grpc.Serve(mux.grpc); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			log.Error("gRPC server stopped", "error", err)
		}
	}()
	a.portHTTP = portHTTPServer(connect, log)
	go func() {
		if err := a.portHTTP.Serve(mux.http); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("Connect and gRPC-Web server stopped", "error", err)
		}
	}()
	log.Info("gRPC frontend listening", "addr", a.grpcLis.Addr().String(), "tls", tlsCfg != nil, "protocols", "gRPC, Connect, gRPC-Web; HTTP/2 and HTTP/1.1")
	if cfg.HTTPAddr == "" {
		return nil
	}
	return a.serveHTTPPort(cfg.HTTPAddr, tlsCfg, handler, "/healthz /metrics "+DescriptorsPath)
}

// serveHTTPPort listens on addr and serves handler there, over TLS when tlsCfg is set, until
// Stop; paths says in the log what it serves.
func (a *App) serveHTTPPort(addr string, tlsCfg *tls.Config, handler http.Handler, paths string) error {
	var err error
	if a.httpLis, err = net.Listen("tcp", addr); err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	a.http = &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second, TLSConfig: tlsCfg,
		// net/http's own complaints (failed TLS handshakes, handler panics) go to the
		// process's log rather than to bare stderr.
		ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelWarn)}
	a.httpTLS = tlsCfg != nil
	go func() {
		var err error
		if tlsCfg != nil {
			// The certificate comes from TLSConfig.GetCertificate, hence no file names.
			err = a.http.ServeTLS(a.httpLis, "", "")
		} else {
			err = a.http.Serve(a.httpLis)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("HTTP server stopped", "error", err)
		}
	}()
	a.log.Info("HTTP listening", "addr", a.httpLis.Addr().String(), "tls", tlsCfg != nil, "paths", paths)
	return nil
}

// portHTTPServer is the net/http server of the gRPC port: Connect and gRPC-Web over HTTP/1.1
// and HTTP/2 (cleartext HTTP/2 too: portMux has already terminated any TLS). It sets no read
// or write timeout, which would cut StreamIncoming and CallStream; HTTP/2 pings find dead
// peers, as gRPC's keepalives do.
func portHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           h,
		Protocols:         &protocols,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		HTTP2:             &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 10 * time.Second},
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// HTTPScheme is "https" when the HTTP port speaks TLS, else "http".
func (a *App) HTTPScheme() string {
	// Not http.Server.TLSConfig: net/http fills that in for plaintext servers too.
	if a.httpTLS {
		return "https"
	}
	return "http"
}

// security is what the process's security settings load into.
type security struct {
	// tls configures the ports; nil means plaintext.
	tls *tls.Config
	// acl is the §6.3 policy; nil means none.
	acl *acl.Policy
}

// loadSecurity reads the TLS and ACL files, which only the server role uses.
func loadSecurity(cfg Config, roles Roles, log *slog.Logger) (security, error) {
	var sec security
	var err error
	if !roles.Server {
		// A worker's HTTP port (/metrics, /healthz) speaks TLS as a server's does.
		if cfg.HTTPAddr != "" {
			sec.tls, err = ServerTLS(cfg, log)
		}
		return sec, err
	}
	if sec.tls, err = ServerTLS(cfg, log); err != nil {
		return sec, err
	}
	if sec.acl, err = LoadACL(cfg); err != nil {
		return sec, err
	}
	if sec.tls == nil {
		log.Info("gRPC and HTTP ports in plaintext; set SW4RM_TLS_CERT_FILE and SW4RM_TLS_KEY_FILE for TLS")
	} else {
		log.Info("TLS on the gRPC and HTTP ports", "cert", cfg.TLSCertFile, "mutual", cfg.TLSClientCAFile != "")
	}
	if sec.acl != nil {
		log.Info("ACL loaded", "file", cfg.ACLFile, "rules", len(sec.acl.Rules), "default", sec.acl.Default)
	}
	return sec, nil
}

// LoadACL loads the §6.3 access-control list cfg.ACLFile names; nil when it names none.
func LoadACL(cfg Config) (*acl.Policy, error) {
	if cfg.ACLFile == "" {
		return nil, nil
	}
	p, err := acl.Load(cfg.ACLFile)
	if err != nil {
		return nil, settingError("SW4RM_ACL_FILE", err)
	}
	return p, nil
}
