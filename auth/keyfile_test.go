package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func writeKey(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

// TestLoadPrivateKeyForms: the same seed in each accepted form yields the same key.
func TestLoadPrivateKeyForms(t *testing.T) {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(i * 7)
	}
	want := ed25519.NewKeyFromSeed(seed)
	der, err := x509.MarshalPKCS8PrivateKey(want)
	require.NoError(t, err)
	forms := map[string]string{
		"hex line":       hex.EncodeToString(seed) + "\n",
		"hex upper":      strings.ToUpper(hex.EncodeToString(seed)),
		"base64":         base64.StdEncoding.EncodeToString(seed),
		"base64 raw url": "  " + base64.RawURLEncoding.EncodeToString(seed) + "\n\n",
		"pkcs8 pem":      string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
	}
	for name, content := range forms {
		got, err := LoadPrivateKey(writeKey(t, content))
		require.NoError(t, err, name)
		assert.True(t, want.Equal(got), name)
	}
}

// TestLoadPrivateKeyRefusals: a wrong length, another algorithm, garbage or a missing file
// are refused, and the error never repeats the file's content.
func TestLoadPrivateKeyRefusals(t *testing.T) {
	_, err := LoadPrivateKey(filepath.Join(t.TempDir(), "absent"))
	require.Error(t, err)

	secret := hex.EncodeToString(make([]byte, 31))
	_, err = LoadPrivateKey(writeKey(t, secret))
	require.ErrorContains(t, err, "31 bytes")
	assert.NotContains(t, err.Error(), secret)

	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ecDER, err := x509.MarshalPKCS8PrivateKey(ec)
	require.NoError(t, err)
	_, err = LoadPrivateKey(writeKey(t, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER}))))
	require.ErrorContains(t, err, "not an Ed25519 key")

	for name, content := range map[string]string{
		"empty":      "  \n",
		"garbage":    "not a key at all!",
		"two lines":  hex.EncodeToString(make([]byte, 32)) + "\n" + hex.EncodeToString(make([]byte, 32)),
		"public pem": string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte{1, 2, 3}})),
		"bad pkcs8":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1, 2, 3}})),
	} {
		_, err := LoadPrivateKey(writeKey(t, content))
		assert.Error(t, err, name)
	}
}
