package sdk

import (
	"crypto/tls"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sw4rm/sw4rm-temporal/tlsfiles"
)

// The variables Dial reads for its transport when no WithTLS or WithTLSConfig option is
// given: any of them set means TLS, none means plaintext.
const (
	// EnvTLSCAFile is the PEM bundle of CAs that sign the server's certificate; empty means
	// the system's roots.
	EnvTLSCAFile = "SW4RM_TLS_CA_FILE"
	// EnvTLSClientCertFile is the agent's PEM client certificate, for servers that require
	// mutual TLS; with EnvTLSClientKeyFile.
	EnvTLSClientCertFile = "SW4RM_TLS_CLIENT_CERT_FILE"
	// EnvTLSClientKeyFile is the private key of EnvTLSClientCertFile.
	EnvTLSClientKeyFile = "SW4RM_TLS_CLIENT_KEY_FILE"
)

// tlsOption is a Dial option that Dial turns into TLS transport credentials; grpc.NewClient
// alone ignores it (EmptyDialOption), so it only means something to Dial.
type tlsOption struct {
	grpc.EmptyDialOption
	caFile, certFile, keyFile string
	config                    *tls.Config
}

// WithTLS makes Dial connect over TLS. caFile is the PEM bundle of CAs that sign the server's
// certificate (empty: the system's roots); certFile and keyFile, both or neither, are the
// agent's client certificate for a server that requires mutual TLS, read again when the
// files change. A file that does not load makes Dial fail.
func WithTLS(caFile, certFile, keyFile string) grpc.DialOption {
	return tlsOption{caFile: caFile, certFile: certFile, keyFile: keyFile}
}

// WithTLSConfig makes Dial connect over TLS configured by cfg (nil: the system's roots, no
// client certificate).
func WithTLSConfig(cfg *tls.Config) grpc.DialOption {
	if cfg == nil {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return tlsOption{config: cfg}
}

func (o tlsOption) credentials() (credentials.TransportCredentials, error) {
	cfg, err := o.tlsConfig()
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(cfg), nil
}

// tlsConfig is the option's TLS configuration: the one given, or the one its files make.
func (o tlsOption) tlsConfig() (*tls.Config, error) {
	if o.config != nil {
		return o.config, nil
	}
	cfg, err := tlsfiles.ClientConfig(o.caFile, o.certFile, o.keyFile)
	if err != nil {
		return nil, fmt.Errorf("sw4rm: TLS: %w", err)
	}
	return cfg, nil
}

// tlsConfigFromEnv is the TLS configuration TLSFromEnv describes, nil for plaintext.
func tlsConfigFromEnv() (*tls.Config, error) {
	ca, cert, key := os.Getenv(EnvTLSCAFile), os.Getenv(EnvTLSClientCertFile), os.Getenv(EnvTLSClientKeyFile)
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	cfg, err := tlsOption{caFile: ca, certFile: cert, keyFile: key}.tlsConfig()
	if err != nil {
		return nil, fmt.Errorf("%w (from %s, %s, %s)", err, EnvTLSCAFile, EnvTLSClientCertFile, EnvTLSClientKeyFile)
	}
	return cfg, nil
}

// TLSFromEnv returns the transport credentials that SW4RM_TLS_CA_FILE,
// SW4RM_TLS_CLIENT_CERT_FILE and SW4RM_TLS_CLIENT_KEY_FILE describe: TLS when any is set,
// plaintext when none is.
func TLSFromEnv() (credentials.TransportCredentials, error) {
	cfg, err := tlsConfigFromEnv()
	switch {
	case err != nil:
		return nil, err
	case cfg == nil:
		return insecure.NewCredentials(), nil
	}
	return credentials.NewTLS(cfg), nil
}

// dialOptions resolves Dial's options: the reconnect backoff and a transport first — from a
// WithTLS or WithTLSConfig option if there is one, else from the environment (TLSFromEnv) —
// then the caller's options in order, so that any of them, grpc.WithTransportCredentials
// included, wins over what comes before.
func dialOptions(opts []grpc.DialOption) ([]grpc.DialOption, error) {
	out := []grpc.DialOption{grpc.WithConnectParams(ReconnectParams)}
	explicit := false
	for _, o := range opts {
		if _, ok := o.(tlsOption); ok {
			explicit = true
		}
	}
	if !explicit {
		creds, err := TLSFromEnv()
		if err != nil {
			return nil, err
		}
		out = append(out, grpc.WithTransportCredentials(creds))
	}
	for _, o := range opts {
		if t, ok := o.(tlsOption); ok {
			creds, err := t.credentials()
			if err != nil {
				return nil, err
			}
			o = grpc.WithTransportCredentials(creds)
		}
		out = append(out, o)
	}
	return out, nil
}
