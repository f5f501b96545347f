// Package auth is SW4RM's agent identity and authorization (§6, §23): the authentication
// mode, the principal a call is proven to come from, and the helpers the frontend, the SDK
// and the CLI share. The mechanism of a signed call is in protocol/signing; the server side
// that verifies it is frontend/auth.go.
package auth

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"strings"

	"github.com/sw4rm/sw4rm-temporal/protocol/signing"
)

// Mode is how strictly the frontend authenticates callers (§6.5): Off for a single-user
// laptop, Optional to verify what is signed and log what is not, Required to refuse anything
// unproven.
type Mode int

const (
	// Off trusts every caller, as §6.2 allows on a trusted local machine.
	Off Mode = iota
	// Optional verifies signed calls (a bad signature is refused) and lets unsigned ones
	// through as before, logging them.
	Optional
	// Required refuses unsigned calls and authorizes every call, deny by default.
	Required
)

// String returns the mode's configuration name.
func (m Mode) String() string {
	switch m {
	case Optional:
		return "optional"
	case Required:
		return "required"
	default:
		return "off"
	}
}

// ParseMode reads SW4RM_AUTH's value: "off", "optional" or "required" ("" is off).
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "off":
		return Off, nil
	case "optional":
		return Optional, nil
	case "required":
		return Required, nil
	}
	return Off, fmt.Errorf("SW4RM_AUTH=%q: want off, optional or required", s)
}

// Principal is who a call is proven to come from. The zero value is an anonymous caller.
type Principal struct {
	// Agent is the agent whose key signed the call, when one did.
	Agent string
	// KeyID names the key that signed it (see KeyID).
	KeyID string
	// Operator is the operator whose token authenticated the call, when one did.
	Operator string
}

// Anonymous reports whether nothing was proven about the caller.
func (p Principal) Anonymous() bool { return p.Agent == "" && p.Operator == "" }

// String names the principal for audit records: "agent:<id>", "operator:<name>" or
// "anonymous".
func (p Principal) String() string {
	switch {
	case p.Operator != "":
		return "operator:" + p.Operator
	case p.Agent != "":
		return "agent:" + p.Agent
	default:
		return "anonymous"
	}
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p; the frontend's interceptor sets it once the call is
// verified.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal the interceptor proved for the call, or the zero
// (anonymous) principal.
func FromContext(ctx context.Context) Principal {
	p, _ := ctx.Value(principalKey{}).(Principal)
	return p
}

// The key algorithms of §6.2; protocol/signing owns the names.
const (
	// AlgorithmEd25519 names Ed25519 keys (32 raw bytes), the algorithm §6.2 prefers.
	AlgorithmEd25519 = signing.AlgorithmEd25519
	// AlgorithmP256 names ECDSA P-256 keys (65-byte uncompressed SEC 1 points), §6.2's
	// alternative where NIST-approved algorithms are required.
	AlgorithmP256 = signing.AlgorithmP256
)

// KeyAlgorithm tells the algorithm of a public key as AgentDescriptor.public_key carries it:
// 32 bytes are Ed25519, 65 bytes an uncompressed P-256 point (checked to be on the curve).
func KeyAlgorithm(pub []byte) (string, error) {
	switch len(pub) {
	case ed25519.PublicKeySize:
		return AlgorithmEd25519, nil
	case signing.P256PublicKeySize:
		if _, err := signing.ParseP256PublicKey(pub); err != nil {
			return "", fmt.Errorf("public_key is not a valid P-256 point: %w", err)
		}
		return AlgorithmP256, nil
	}
	return "", fmt.Errorf("public_key must be a raw 32-byte Ed25519 key or a 65-byte uncompressed P-256 point, not %d bytes", len(pub))
}

// VerifyDigest checks a signed call against one public key of either algorithm; digest is
// the SHA-256 of the request's wire bytes.
func VerifyDigest(algorithm string, pub []byte, c signing.Call, digest [sha256.Size]byte, sig []byte) error {
	switch algorithm {
	case AlgorithmEd25519:
		return signing.VerifyDigest(ed25519.PublicKey(pub), c, digest, sig)
	case AlgorithmP256:
		k, err := signing.ParseP256PublicKey(pub)
		if err != nil {
			return signing.ErrBadSignature
		}
		return signing.VerifyDigestP256(k, c, digest, sig)
	}
	return signing.ErrBadSignature
}

// KeyID names a public key: the algorithm, a colon and the first 16 hex digits of the
// SHA-256 of the raw key, e.g. "ed25519:3b6a27bcceb6a42d".
func KeyID(algorithm string, pub []byte) string { return signing.KeyID(algorithm, pub) }
