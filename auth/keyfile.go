package auth

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
)

// LoadPrivateKey reads an Ed25519 private key from a key file: the 32-byte seed in hex on
// one line (the form `sw4rm keys generate` writes), the seed in base64 (standard or URL
// alphabet, padded or not), or a PKCS#8 PEM block ("PRIVATE KEY", as `openssl genpkey
// -algorithm ed25519` writes). Surrounding whitespace is ignored. The error names the file
// but never its content.
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	key, err := ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return key, nil
}

// ParsePrivateKey reads an Ed25519 private key in one of the forms LoadPrivateKey accepts.
func ParsePrivateKey(b []byte) (ed25519.PrivateKey, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, errors.New("empty: want a 32-byte Ed25519 seed in hex or base64, or a PKCS#8 PEM private key")
	}
	if bytes.HasPrefix(b, []byte("-----BEGIN")) {
		return parsePEM(b)
	}
	s := string(b)
	if strings.ContainsAny(s, "\n\r") {
		return nil, errors.New("want the seed on one line")
	}
	// 64 hex digits are also valid base64 (of 48 bytes), so hex is tried first.
	if seed, err := hex.DecodeString(s); err == nil {
		return fromSeed(seed)
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if seed, err := enc.DecodeString(s); err == nil {
			return fromSeed(seed)
		}
	}
	return nil, errors.New("not a 32-byte Ed25519 seed in hex or base64, nor a PKCS#8 PEM private key")
}

func fromSeed(seed []byte) (ed25519.PrivateKey, error) {
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("the seed has %d bytes, an Ed25519 seed has %d", len(seed), ed25519.SeedSize)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

func parsePEM(b []byte) (ed25519.PrivateKey, error) {
	block, rest := pem.Decode(b)
	if block == nil {
		return nil, errors.New("malformed PEM")
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, errors.New("want exactly one PEM block")
	}
	if block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("PEM block %q: want a PKCS#8 \"PRIVATE KEY\"", block.Type)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("PKCS#8: %w", err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("the PKCS#8 key is a %T, not an Ed25519 key", k)
	}
	return priv, nil
}
