// Package signing is the call-signing mechanism of SW4RM's agent identity (§6.2): an agent
// that registered an Ed25519 public key (AgentDescriptor.public_key) proves each call it makes
// by signing a canonical pre-image of that call and sending the signature in gRPC metadata.
//
// What is signed, and why: the pre-image names the version, the full gRPC method, the agent,
// a timestamp in Unix milliseconds, a nonce, and the SHA-256 of the request's bytes exactly as
// they travel on the wire. Hashing the received bytes — never a re-encoding of the decoded
// message — keeps the signature independent of how any language's protobuf library orders or
// encodes fields; the method binds the signature to one RPC, the timestamp bounds its life
// (clock skew), and the nonce lets a server refuse a replay within that window
// (ReplayGuard). Everything here is pure: no I/O, and time comes from the caller.
package signing

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

// Version names the pre-image format; it is its first line.
const Version = "sw4rm-sig-v1"

// Call is what a signature covers.
type Call struct {
	// Method is the full gRPC method, e.g. "/sw4rm.router.RouterService/SendMessage".
	Method string
	// AgentID is the agent the call is made as.
	AgentID string
	// Timestamp is when it was signed; only its milliseconds count.
	Timestamp time.Time
	// Nonce is unique per call (see wire.SignatureNonceKey).
	Nonce string
	// Body is the request message's bytes exactly as sent (for a stream, its first message).
	Body []byte
}

// Preimage is the canonical byte string an agent signs for c: six lines, each ended by "\n":
// Version, Method, AgentID, the timestamp in Unix milliseconds, Nonce, and the lower-case hex
// SHA-256 of Body.
func Preimage(c Call) []byte { return DigestPreimage(c, sha256.Sum256(c.Body)) }

// DigestPreimage is Preimage for a caller that holds only the SHA-256 of the body — a server
// hashes the request's bytes as they arrive and never keeps them.
func DigestPreimage(c Call, digest [sha256.Size]byte) []byte {
	var b strings.Builder
	for _, line := range []string{Version, c.Method, c.AgentID, strconv.FormatInt(c.Timestamp.UnixMilli(), 10), c.Nonce, hex.EncodeToString(digest[:])} {
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

// Sign signs c with priv and returns the metadata to send with the call.
func Sign(priv ed25519.PrivateKey, c Call) map[string]string {
	sig := ed25519.Sign(priv, Preimage(c))
	return map[string]string{
		wire.SignatureAgentKey:     c.AgentID,
		wire.SignatureTimestampKey: strconv.FormatInt(c.Timestamp.UnixMilli(), 10),
		wire.SignatureNonceKey:     c.Nonce,
		wire.SignatureKey:          base64.RawURLEncoding.EncodeToString(sig),
	}
}

// Errors of Parse and Verify, matched with errors.Is.
var (
	// ErrUnsigned: the call carries none of the signing metadata.
	ErrUnsigned = errors.New("signing: the call is not signed")
	// ErrMalformed: the signing metadata is incomplete or badly formed.
	ErrMalformed = errors.New("signing: malformed signing metadata")
	// ErrBadSignature: the signature does not verify with the agent's key.
	ErrBadSignature = errors.New("signing: the signature does not match the agent's key")
	// ErrStale: the timestamp is outside the allowed clock skew.
	ErrStale = errors.New("signing: the timestamp is outside the allowed clock skew")
	// ErrReplayed: the nonce was already used within the skew window.
	ErrReplayed = errors.New("signing: the call was already made (replayed nonce)")
)

// Parse reads the signing metadata (first value of each key) and returns the call it claims,
// without Method and Body, which the server knows, and the signature.
func Parse(get func(key string) string) (Call, []byte, error) {
	agent, ts, nonce, sig := get(wire.SignatureAgentKey), get(wire.SignatureTimestampKey), get(wire.SignatureNonceKey), get(wire.SignatureKey)
	if agent == "" && ts == "" && nonce == "" && sig == "" {
		return Call{}, nil, ErrUnsigned
	}
	if agent == "" || ts == "" || nonce == "" || sig == "" {
		return Call{}, nil, fmt.Errorf("%w: %s, %s, %s and %s are all required", ErrMalformed, wire.SignatureAgentKey, wire.SignatureTimestampKey, wire.SignatureNonceKey, wire.SignatureKey)
	}
	ms, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return Call{}, nil, fmt.Errorf("%w: %s %q is not Unix milliseconds", ErrMalformed, wire.SignatureTimestampKey, ts)
	}
	if !validNonce(nonce) {
		return Call{}, nil, fmt.Errorf("%w: %s must be 16-64 characters of A-Z a-z 0-9 - _", ErrMalformed, wire.SignatureNonceKey)
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || len(raw) != ed25519.SignatureSize {
		return Call{}, nil, fmt.Errorf("%w: %s must be a base64url Ed25519 signature", ErrMalformed, wire.SignatureKey)
	}
	return Call{AgentID: agent, Timestamp: time.UnixMilli(ms), Nonce: nonce}, raw, nil
}

func validNonce(n string) bool {
	if len(n) < 16 || len(n) > 64 {
		return false
	}
	for _, r := range n {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_'
		if !ok {
			return false
		}
	}
	return true
}

// Verify checks sig over c with pub (a 32-byte Ed25519 public key).
func Verify(pub ed25519.PublicKey, c Call, sig []byte) error {
	return VerifyDigest(pub, c, sha256.Sum256(c.Body), sig)
}

// VerifyDigest is Verify for a caller that holds only the SHA-256 of the body.
func VerifyDigest(pub ed25519.PublicKey, c Call, digest [sha256.Size]byte, sig []byte) error {
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: the registered key is not an Ed25519 public key", ErrBadSignature)
	}
	if !ed25519.Verify(pub, DigestPreimage(c, digest), sig) {
		return ErrBadSignature
	}
	return nil
}

// ReplayGuard refuses calls whose timestamp is outside ±Skew of the server's clock and calls
// whose (agent, nonce) it saw within the last 2×Skew — the window in which a replay could
// still pass the timestamp check. It is safe for concurrent use; one guard per process.
type ReplayGuard struct {
	// Skew is the largest clock difference accepted (default 30 s).
	Skew time.Duration

	mu    sync.Mutex
	seen  map[string]time.Time // agent + "\x00" + nonce → when it stops mattering
	swept time.Time
}

// Check admits a call signed at c.Timestamp, observed at now, and remembers its nonce.
func (g *ReplayGuard) Check(c Call, now time.Time) error {
	skew := g.Skew
	if skew <= 0 {
		skew = 30 * time.Second
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.seen == nil {
		g.seen = map[string]time.Time{}
	}
	if now.Sub(g.swept) > skew {
		// Forget nonces whose calls no timestamp check would admit any more.
		for k, until := range g.seen {
			if now.After(until) {
				delete(g.seen, k)
			}
		}
		g.swept = now
	}
	if d := now.Sub(c.Timestamp); d > skew || d < -skew {
		return fmt.Errorf("%w: signed at %s, %s from the server's clock (limit %s)", ErrStale, c.Timestamp.UTC().Format(time.RFC3339Nano), d.Round(time.Millisecond), skew)
	}
	key := c.AgentID + "\x00" + c.Nonce
	if until, ok := g.seen[key]; ok && !now.After(until) {
		return ErrReplayed
	}
	g.seen[key] = c.Timestamp.Add(2 * skew)
	return nil
}

// The key algorithms of §6.2.
const (
	// AlgorithmEd25519 names Ed25519 keys (32 raw bytes), the algorithm §6.2 prefers.
	AlgorithmEd25519 = "ed25519"
	// AlgorithmP256 names ECDSA P-256 keys (65-byte uncompressed SEC 1 points), §6.2's
	// alternative where NIST-approved algorithms are required.
	AlgorithmP256 = "ecdsa-p256"
)

// KeyID names a public key: the algorithm, a colon and the first 16 hex digits of the
// SHA-256 of the raw key, e.g. "ed25519:3b6a27bcceb6a42d".
func KeyID(algorithm string, pub []byte) string {
	sum := sha256.Sum256(pub)
	return algorithm + ":" + hex.EncodeToString(sum[:8])
}
