package hitl

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sw4rm/sw4rm-temporal/protocol/signing"
)

// Attested decisions (§15.1, §23: HITL decisions are authenticated; issue 15: no operator
// secret in Temporal history). A decision signal is stored in the workflow's history like
// any signal input, so it must not carry anything an attacker who reads that history could
// reuse. Instead of the operator's token it carries an Attestation: an Ed25519 signature over
// the decision itself, which expires within minutes. Whoever reads it can replay it only to
// the invocation it names, with the decision it names, before it expires — and the first
// valid decision already won.
//
// Two kinds of key sign attestations:
//   - the deployment's decision key (SW4RM_HITL_DECISION_KEY_FILE): the frontend signs a
//     decision after it authenticated the operator (bearer token or a principal proven by the
//     auth interceptor) — the CLI and gRPC doors;
//   - an operator's own key (SW4RM_HITL_OPERATOR_KEYS): `sw4rm hitl sign` signs a decision
//     the operator then sends with a plain `temporal workflow signal` — the raw door. Such a
//     key vouches for its operator only, and only through that door.
//
// Verification is pure (ed25519.Verify) and takes the time as an argument, so the workflow
// runs it deterministically with workflow.Now.

// AttestationVersion is the first line of an attestation's pre-image.
const AttestationVersion = "sw4rm-hitl-decision-v1"

// DefaultAttestationTTL is how long an attestation stays valid when its signer names no
// other lifetime: long enough to paste a signed decision into a terminal, short enough that
// one found later is useless.
const DefaultAttestationTTL = 10 * time.Minute

// MaxAttestationTTL bounds an attestation's lifetime: the workflow refuses one that expires
// further ahead of its clock.
const MaxAttestationTTL = 24 * time.Hour

// Attestation is the proof a decision carries (see Attest).
type Attestation struct {
	// KeyID names the signing key (signing.KeyID of its public key).
	KeyID string `json:"key_id"`
	// ExpiresAt is when the attestation stops being valid, in Unix milliseconds.
	ExpiresAt int64 `json:"expires_at"`
	// Signature is the Ed25519 signature of AttestationPreimage (JSON: base64).
	Signature []byte `json:"signature"`
}

// AttestationPreimage is the canonical byte string an attestation signs: eight lines, each
// ended by "\n": AttestationVersion, invocation_id, decision, the lower-case hex SHA-256 of
// the rationale, the lower-case hex SHA-256 of the patch (of no bytes when there is none),
// operator, via, and expires_at in Unix milliseconds. Free text (the rationale) and bytes
// (the patch) enter as digests so that no value can shift the lines; the other fields must
// not contain a line break. Every field is taken exactly as it travels, not normalised.
func AttestationPreimage(d Decision, expiresAt int64) ([]byte, error) {
	// A slice, not a map: the workflow runs this, and map order is random.
	for _, f := range [][2]string{{"invocation_id", d.InvocationID}, {"decision", string(d.Decision)}, {"operator", d.Operator}, {"via", d.Via}} {
		if strings.ContainsAny(f[1], "\r\n") {
			return nil, fmt.Errorf("validation_error: %s must not contain a line break", f[0])
		}
	}
	rationale := sha256.Sum256([]byte(d.Rationale))
	patch := sha256.Sum256(d.Patch)
	var b strings.Builder
	for _, line := range []string{
		AttestationVersion, d.InvocationID, string(d.Decision), hex.EncodeToString(rationale[:]), hex.EncodeToString(patch[:]),
		d.Operator, d.Via, strconv.FormatInt(expiresAt, 10),
	} {
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return []byte(b.String()), nil
}

// Attest returns d signed by key until expires, without any token: the form every door
// sends.
func Attest(d Decision, key ed25519.PrivateKey, expires time.Time) (Decision, error) {
	if len(key) != ed25519.PrivateKeySize {
		return Decision{}, errors.New("attest: not an Ed25519 private key")
	}
	d.Token, d.Attestation = "", nil
	ms := expires.UnixMilli()
	pre, err := AttestationPreimage(d, ms)
	if err != nil {
		return Decision{}, err
	}
	pub, _ := key.Public().(ed25519.PublicKey)
	d.Attestation = &Attestation{KeyID: signing.KeyID(signing.AlgorithmEd25519, pub), ExpiresAt: ms, Signature: ed25519.Sign(key, pre)}
	return d, nil
}

// Authorize checks an attested decision at now — its attestation and the operator's right to
// decide this reason type — and returns the id of the key that vouched for it. It is
// deterministic, so the workflow runs it, with workflow.Now, on every decision it receives.
// A decision carrying a token is refused whatever else it carries: accepting it would invite
// secrets into history. A decision through the message door (ViaMessage) must name the
// policy's HITL agent, which may decide every reason type, and be signed by a decision key.
func (p Policy) Authorize(d Decision, reasonType string, now time.Time) (string, error) {
	if d.Token != "" {
		return "", errors.New("permission_denied: a decision carrying a token is refused, since a signal's input stays in workflow history " +
			"(that token is in this run's history now: rotate it); decide with `sw4rm hitl decide`, over gRPC, or send a decision signed by `sw4rm hitl sign`")
	}
	a := d.Attestation
	if a == nil {
		return "", errors.New("permission_denied: the decision carries no attestation; decide with `sw4rm hitl decide`, over gRPC, or send a decision signed by `sw4rm hitl sign`")
	}
	if d.Operator == "" {
		return "", errors.New("permission_denied: an operator is required")
	}
	// A decision through the message door is the HITL agent's, vouched for by the frontend
	// that took its message: it names the agent, never an operator, and only a decision key
	// signs it. Every other door names an operator.
	fromAgent := d.Via == ViaMessage
	op, ok := p.Operator(d.Operator)
	switch {
	case fromAgent && (p.Agent == "" || d.Operator != p.Agent):
		return "", fmt.Errorf("permission_denied: %q is not the deployment's HITL agent, the only one that decides through the message plane", d.Operator)
	case fromAgent:
		op = Operator{Name: p.Agent}
	case !ok:
		return "", fmt.Errorf("permission_denied: unknown operator %q", d.Operator)
	}
	pub, operatorKey := p.key(op, a.KeyID)
	if pub == nil {
		return "", fmt.Errorf("permission_denied: key %s is neither the deployment's decision key nor a key of operator %q", a.KeyID, d.Operator)
	}
	if operatorKey && d.Via != "" && d.Via != "signal" {
		return "", fmt.Errorf("permission_denied: an operator's own key vouches for the signal door only, not via %q", d.Via)
	}
	pre, err := AttestationPreimage(d, a.ExpiresAt)
	if err != nil {
		return "", fmt.Errorf("permission_denied: %v", err)
	}
	if !ed25519.Verify(pub, pre, a.Signature) {
		return "", fmt.Errorf("permission_denied: the attestation does not match the decision (signed by %s)", a.KeyID)
	}
	expires := time.UnixMilli(a.ExpiresAt)
	if now.After(expires) {
		return "", fmt.Errorf("permission_denied: the attestation expired at %s (%s ago); sign the decision again",
			expires.UTC().Format(time.RFC3339), now.Sub(expires).Round(time.Second))
	}
	if expires.Sub(now) > MaxAttestationTTL {
		return "", fmt.Errorf("permission_denied: the attestation expires at %s, more than %s ahead", expires.UTC().Format(time.RFC3339), MaxAttestationTTL)
	}
	if fromAgent {
		return a.KeyID, nil // the HITL agent decides every reason type
	}
	if err := p.Permit(d.Operator, reasonType); err != nil {
		return "", err
	}
	return a.KeyID, nil
}

// key finds the public key keyID names among the decision keys and op's own keys, and says
// whether it is one of op's.
func (p Policy) key(op Operator, keyID string) (ed25519.PublicKey, bool) {
	for _, k := range p.DecisionKeys {
		if signing.KeyID(signing.AlgorithmEd25519, k) == keyID {
			return k, false
		}
	}
	for _, k := range op.PublicKeys {
		if signing.KeyID(signing.AlgorithmEd25519, k) == keyID {
			return k, true
		}
	}
	return nil, false
}

// WithoutTokens returns the policy without its operators' token hashes: the form a workflow
// receives and so records in its history, where a hash would let anyone who reads the history
// test guesses of a token offline. Attested decisions need only names, reason types and
// public keys.
func (p Policy) WithoutTokens() Policy {
	p.Operators = slices.Clone(p.Operators)
	for i := range p.Operators {
		p.Operators[i].TokenSHA256 = ""
	}
	return p
}

// Operator finds an operator by name.
func (p Policy) Operator(name string) (Operator, bool) {
	idx := slices.IndexFunc(p.Operators, func(o Operator) bool { return o.Name == name })
	if idx < 0 {
		return Operator{}, false
	}
	return p.Operators[idx], true
}

// Permit checks that the operator exists and may decide invocations of this reason type.
func (p Policy) Permit(operator, reasonType string) error {
	op, ok := p.Operator(operator)
	if !ok {
		return fmt.Errorf("permission_denied: unknown operator %q", operator)
	}
	if len(op.Reasons) > 0 && !slices.Contains(op.Reasons, reasonType) {
		return fmt.Errorf("permission_denied: operator %q may not decide %s invocations", operator, reasonType)
	}
	return nil
}

// ParseOperatorKeys attaches the operators' own public keys to ops, from their configuration
// form (SW4RM_HITL_OPERATOR_KEYS): comma-separated "name=<key>" entries, the key being the
// 32-byte Ed25519 public key in base64 (standard or URL alphabet) or hex. An operator may be
// named more than once, to hold a new key beside the old one while it rotates. Every name
// must be an operator of ops, which keeps its token and reason types; ops is not changed.
func ParseOperatorKeys(ops []Operator, spec string) ([]Operator, error) {
	out := slices.Clone(ops)
	for i := range out {
		out[i].PublicKeys = slices.Clone(out[i].PublicKeys)
	}
	for _, entry := range strings.Split(spec, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, value, ok := strings.Cut(entry, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("operator key entry %q: want name=<base64 Ed25519 public key>", entry)
		}
		pub, err := parsePublicKey(strings.TrimSpace(value))
		if err != nil {
			return nil, fmt.Errorf("operator %q: %w", name, err)
		}
		idx := slices.IndexFunc(out, func(o Operator) bool { return o.Name == name })
		if idx < 0 {
			return nil, fmt.Errorf("operator %q has a key but is not in SW4RM_HITL_OPERATORS", name)
		}
		if !slices.ContainsFunc(out[idx].PublicKeys, func(k ed25519.PublicKey) bool { return k.Equal(pub) }) {
			out[idx].PublicKeys = append(out[idx].PublicKeys, pub)
		}
	}
	return out, nil
}

// parsePublicKey reads a raw 32-byte Ed25519 public key in hex or base64.
func parsePublicKey(s string) (ed25519.PublicKey, error) {
	// 64 hex digits are also valid base64 (of 48 bytes), so hex is tried first.
	if b, err := hex.DecodeString(s); err == nil && len(b) == ed25519.PublicKeySize {
		return ed25519.PublicKey(b), nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			if len(b) != ed25519.PublicKeySize {
				return nil, fmt.Errorf("the public key has %d bytes, an Ed25519 public key has %d", len(b), ed25519.PublicKeySize)
			}
			return ed25519.PublicKey(b), nil
		}
	}
	return nil, errors.New("the public key is neither base64 nor hex")
}
