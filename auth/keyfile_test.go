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

	"github.com/stretchr/testify/require"
)

// seed00 is the seed 00 01 02 … 1f of the published signing vectors.
func seed00() []byte {
	s := make([]byte, ed25519.SeedSize)
	for i := range s {
		s[i] = byte(i)
	}
	return s
}

// TestParsePrivateKeyForms: every accepted form of one key yields that key — the public key
// is the vectors' — and surrounding whitespace does not matter.
func TestParsePrivateKeyForms(t *testing.T) {
	want := ed25519.NewKeyFromSeed(seed00())
	require.Equal(t, "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8", hex.EncodeToString(want.Public().(ed25519.PublicKey)))
	der, err := x509.MarshalPKCS8PrivateKey(want)
	require.NoError(t, err)
	forms := map[string]string{
		"hex seed":             hex.EncodeToString(seed00()) + "\n",
		"upper-case hex":       strings.ToUpper(hex.EncodeToString(seed00())),
		"hex seed+public":      hex.EncodeToString(want),
		"base64 seed":          base64.StdEncoding.EncodeToString(seed00()),
		"raw base64 seed":      base64.RawStdEncoding.EncodeToString(seed00()),
		"base64url seed":       base64.URLEncoding.EncodeToString(seed00()),
		"raw base64url seed":   "  " + base64.RawURLEncoding.EncodeToString(seed00()) + "\r\n",
		"base64 seed+public":   base64.StdEncoding.EncodeToString(want),
		"PKCS#8 PEM":           string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"PEM after blank line": "\n" + string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
	}
	for name, text := range forms {
		got, err := ParsePrivateKey([]byte(text))
		require.NoError(t, err, name)
		require.Equal(t, want, got, name)
	}
}

// TestParsePrivateKeyRefuses: anything that is not exactly an Ed25519 private key is an
// ErrBadKey, and the error does not echo the key material.
func TestParsePrivateKeyRefuses(t *testing.T) {
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ecDER, err := x509.MarshalPKCS8PrivateKey(ec)
	require.NoError(t, err)
	ecSEC1, err := x509.MarshalECPrivateKey(ec)
	require.NoError(t, err)
	mismatched := append(append([]byte{}, seed00()...), make([]byte, 32)...)
	edDER, err := x509.MarshalPKCS8PrivateKey(ed25519.NewKeyFromSeed(seed00()))
	require.NoError(t, err)
	bad := map[string]string{
		"empty":                "",
		"blank":                " \n\t",
		"31-byte hex":          hex.EncodeToString(seed00()[:31]),
		"33-byte base64":       base64.StdEncoding.EncodeToString(append(seed00(), 0)),
		"seed+wrong public":    hex.EncodeToString(mismatched),
		"not an encoding":      "this is not a key at all!",
		"ECDSA PKCS#8":         string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER})),
		"EC PRIVATE KEY block": string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ecSEC1})),
		"broken PEM":           "-----BEGIN PRIVATE KEY-----\nnot base64\n",
		"garbage PKCS#8":       string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1, 2, 3}})),
		"two PEM blocks": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: edDER})) +
			string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: edDER})),
	}
	for name, text := range bad {
		_, err := ParsePrivateKey([]byte(text))
		require.ErrorIs(t, err, ErrBadKey, name)
	}
	_, err = ParsePrivateKey([]byte(hex.EncodeToString(mismatched)))
	require.NotContains(t, err.Error(), hex.EncodeToString(seed00()), "the error does not echo the seed")
}

// TestLoadPrivateKey reads a key file, and names the file when it cannot.
func TestLoadPrivateKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.key")
	require.NoError(t, os.WriteFile(path, []byte(hex.EncodeToString(seed00())+"\n"), 0o600))
	got, err := LoadPrivateKey(path)
	require.NoError(t, err)
	require.Equal(t, ed25519.NewKeyFromSeed(seed00()), got)

	_, err = LoadPrivateKey(filepath.Join(dir, "missing.key"))
	require.ErrorIs(t, err, os.ErrNotExist)

	bad := filepath.Join(dir, "bad.key")
	require.NoError(t, os.WriteFile(bad, []byte("nope"), 0o600))
	_, err = LoadPrivateKey(bad)
	require.ErrorIs(t, err, ErrBadKey)
	require.Contains(t, err.Error(), bad)
}
