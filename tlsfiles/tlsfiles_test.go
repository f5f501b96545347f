package tlsfiles_test

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/tlsfiles"
	"github.com/sw4rm/sw4rm-temporal/tlsfiles/tlstest"
)

func leafCN(t *testing.T, c *tls.Certificate) string {
	t.Helper()
	require.NotNil(t, c)
	require.NotNil(t, c.Leaf)
	return c.Leaf.Subject.CommonName
}

// TestKeyPairReloads: replaced files are read at the next use; a replacement that does not
// load (the key not written yet) keeps the previous pair and is reported once; when the files
// agree again the new pair is served.
func TestKeyPairReloads(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	p := ca.Server(t, "first")
	var reports []error
	pair, err := tlsfiles.LoadKeyPair(p.CertFile, p.KeyFile, func(err error) { reports = append(reports, err) })
	require.NoError(t, err)
	assert.Equal(t, "first", leafCN(t, pair.Certificate()))
	assert.Empty(t, reports, "unchanged files are not read again")

	ca.WriteServer(t, p, "second")
	assert.Equal(t, "second", leafCN(t, pair.Certificate()))
	require.Len(t, reports, 1)
	assert.NoError(t, reports[0])

	// Half a rotation: a new certificate beside the old key.
	keep, err := os.ReadFile(p.KeyFile)
	require.NoError(t, err)
	ca.WriteServer(t, p, "fourth")
	require.NoError(t, os.WriteFile(p.KeyFile, keep, 0o600))
	assert.Equal(t, "second", leafCN(t, pair.Certificate()), "a mismatched pair is not served")
	assert.Equal(t, "second", leafCN(t, pair.Certificate()))
	require.Len(t, reports, 2, "a replacement that does not load is reported once")
	assert.ErrorContains(t, reports[1], "still serving the previous certificate")

	// The rotation completes.
	ca.WriteServer(t, p, "fifth")
	assert.Equal(t, "fifth", leafCN(t, pair.Certificate()))
	require.Len(t, reports, 3)
	assert.NoError(t, reports[2])

	// Files gone mid-rotation: the pair in service stays.
	require.NoError(t, os.Remove(p.KeyFile))
	assert.Equal(t, "fifth", leafCN(t, pair.Certificate()))
	assert.Len(t, reports, 4)
	assert.Equal(t, "fifth", leafCN(t, pair.Certificate()))
	assert.Len(t, reports, 4)
}

// TestServerConfig: off without files; both halves of a pair or neither; a client CA turns
// on mutual TLS and needs the server's own pair; files that do not load are refused.
func TestServerConfig(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	p := ca.Server(t, "server")
	empty := filepath.Join(t.TempDir(), "empty.pem")
	require.NoError(t, os.WriteFile(empty, []byte("not a certificate\n"), 0o600))

	cfg, err := tlsfiles.ServerConfig("", "", "", nil)
	require.NoError(t, err)
	assert.Nil(t, cfg)

	cfg, err = tlsfiles.ServerConfig(p.CertFile, p.KeyFile, "", nil)
	require.NoError(t, err)
	require.NotNil(t, cfg)
	assert.Equal(t, tls.NoClientCert, cfg.ClientAuth)
	got, err := cfg.GetCertificate(&tls.ClientHelloInfo{})
	require.NoError(t, err)
	assert.Equal(t, "server", leafCN(t, got))

	cfg, err = tlsfiles.ServerConfig(p.CertFile, p.KeyFile, ca.File, nil)
	require.NoError(t, err)
	assert.Equal(t, tls.RequireAndVerifyClientCert, cfg.ClientAuth)
	assert.NotNil(t, cfg.ClientCAs)

	for _, tc := range []struct{ cert, key, ca, want string }{
		{p.CertFile, "", "", "set both files"},
		{"", p.KeyFile, "", "set both files"},
		{"", "", ca.File, "needs the server's own certificate"},
		{p.CertFile, filepath.Join(t.TempDir(), "missing.pem"), "", "missing.pem"},
		{p.CertFile, p.CertFile, "", "certificate " + p.CertFile},
		{p.CertFile, p.KeyFile, empty, "holds no PEM certificate"},
		{p.CertFile, p.KeyFile, filepath.Join(t.TempDir(), "nope.pem"), "nope.pem"},
	} {
		_, err := tlsfiles.ServerConfig(tc.cert, tc.key, tc.ca, nil)
		assert.ErrorContains(t, err, tc.want, "%+v", tc)
	}
}

// TestClientConfig: the CA bundle becomes the roots; a client pair is offered when asked.
func TestClientConfig(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	c := ca.Client(t, "agent-1")

	cfg, err := tlsfiles.ClientConfig("", "", "")
	require.NoError(t, err)
	assert.Nil(t, cfg.RootCAs, "no CA file: the system's roots")
	assert.Nil(t, cfg.GetClientCertificate)

	cfg, err = tlsfiles.ClientConfig(ca.File, c.CertFile, c.KeyFile)
	require.NoError(t, err)
	assert.NotNil(t, cfg.RootCAs)
	got, err := cfg.GetClientCertificate(&tls.CertificateRequestInfo{})
	require.NoError(t, err)
	assert.Equal(t, "agent-1", leafCN(t, got))

	_, err = tlsfiles.ClientConfig("", c.CertFile, "")
	assert.ErrorContains(t, err, "set both files")
	_, err = tlsfiles.ClientConfig("", "", c.KeyFile)
	assert.ErrorContains(t, err, "set both files")
	_, err = tlsfiles.ClientConfig(c.KeyFile, "", "")
	assert.ErrorContains(t, err, "holds no PEM certificate")
	_, err = tlsfiles.ClientConfig("", c.CertFile, c.CertFile)
	assert.Error(t, err)
}
