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
)

// An agent's key file holds its Ed25519 private key (§6.2) in one of these forms, tried in
// this order:
//
//   - hex: the 32-byte seed as 64 hex digits on one line (the documented format), or the
//     64-byte private key (seed followed by public key) as 128 hex digits;
//   - base64 (standard or URL alphabet, with or without padding) of the same 32 or 64 bytes;
//   - PEM: a "PRIVATE KEY" block holding a PKCS#8 Ed25519 key, as `openssl genpkey
//     -algorithm ed25519` writes it.
//
// Surrounding whitespace is ignored. A 64-byte key whose public half does not belong to its
// seed is refused rather than trusted: signing with it would produce signatures no server
// accepts. Errors never include the file's content.

// ErrBadKey is returned, wrapped, for key material that is not an Ed25519 private key in any
// accepted form.
var ErrBadKey = errors.New("auth: not an Ed25519 private key (want a 32-byte seed in hex or base64, or a PKCS#8 PEM)")

// LoadPrivateKey reads the agent's Ed25519 private key from the file at path (see
// ParsePrivateKey for the accepted forms).
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: read key file: %w", err)
	}
	key, err := ParsePrivateKey(raw)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return key, nil
}

// ParsePrivateKey parses an Ed25519 private key: a 32-byte seed (or the 64-byte seed and
// public key) in hex or base64, or a PKCS#8 "PRIVATE KEY" PEM block.
func ParsePrivateKey(raw []byte) (ed25519.PrivateKey, error) {
	text := bytes.TrimSpace(raw)
	if len(text) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrBadKey)
	}
	if bytes.HasPrefix(text, []byte("-----BEGIN")) {
		return parsePEM(text)
	}
	if b, err := hex.DecodeString(string(text)); err == nil {
		return fromBytes(b)
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(string(text)); err == nil {
			return fromBytes(b)
		}
	}
	return nil, ErrBadKey
}

func parsePEM(text []byte) (ed25519.PrivateKey, error) {
	block, rest := pem.Decode(text)
	if block == nil {
		return nil, fmt.Errorf("%w: unreadable PEM", ErrBadKey)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("%w: more than one PEM block", ErrBadKey)
	}
	if block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%w: PEM block %q, want \"PRIVATE KEY\" (PKCS#8)", ErrBadKey, block.Type)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: PKCS#8: %v", ErrBadKey, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: the PKCS#8 key is a %T", ErrBadKey, k)
	}
	return priv, nil
}

// fromBytes turns a decoded seed (32 bytes) or seed-and-public-key (64 bytes) into a key.
func fromBytes(b []byte) (ed25519.PrivateKey, error) {
	switch len(b) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(b), nil
	case ed25519.PrivateKeySize:
		priv := ed25519.NewKeyFromSeed(b[:ed25519.SeedSize])
		if !bytes.Equal(priv[ed25519.SeedSize:], b[ed25519.SeedSize:]) {
			return nil, fmt.Errorf("%w: its public half does not belong to its seed", ErrBadKey)
		}
		return priv, nil
	}
	return nil, fmt.Errorf("%w: %d bytes", ErrBadKey, len(b))
}
