package hitl

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/protocol/signing"
)

// keyOf is a deterministic test key: the seed is b repeated.
func keyOf(b byte) ed25519.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = b
	}
	return ed25519.NewKeyFromSeed(seed)
}

func pubOf(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

var (
	decisionKey = keyOf(1)
	aliceKey    = keyOf(2)
	carolKey    = keyOf(3)
	strangerKey = keyOf(9)
	t0          = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
)

func testPolicy() Policy {
	return Policy{
		Operators: []Operator{
			{Name: "alice", TokenSHA256: HashToken("alice-token"), PublicKeys: []ed25519.PublicKey{pubOf(aliceKey)}},
			{Name: "bob", TokenSHA256: HashToken("bob-token")},
			{Name: "carol", TokenSHA256: HashToken("carol-token"), Reasons: []string{"CONFLICT"}, PublicKeys: []ed25519.PublicKey{pubOf(carolKey)}},
		},
		DecisionKeys: []ed25519.PublicKey{pubOf(decisionKey)},
	}
}

func aDecision() Decision {
	return Decision{InvocationID: "inv-1", Decision: Modify, Rationale: "only tenant 12\nand nothing else", Patch: []byte(`{"tenant":12}`), Operator: "alice", Via: "cli"}
}

func attest(t *testing.T, d Decision, key ed25519.PrivateKey, expires time.Time) Decision {
	t.Helper()
	s, err := Attest(d, key, expires)
	require.NoError(t, err)
	return s
}

// TestAttestationRoundTrip: a decision attested by the decision key is accepted — also after
// a JSON round trip, the way it travels in a signal — and names the key that vouched for it;
// its JSON holds no token.
func TestAttestationRoundTrip(t *testing.T) {
	d := aDecision()
	d.Token = "alice-token" // Attest drops it
	signed := attest(t, d, decisionKey, t0.Add(DefaultAttestationTTL))
	assert.Empty(t, signed.Token)
	b, err := json.Marshal(signed)
	require.NoError(t, err)
	assert.NotContains(t, string(b), "token")
	assert.NotContains(t, string(b), "alice-token")
	var got Decision
	require.NoError(t, json.Unmarshal(b, &got))
	keyID, err := testPolicy().Authorize(got, "SECURITY_APPROVAL", t0.Add(time.Minute))
	require.NoError(t, err)
	assert.Equal(t, signing.KeyID(signing.AlgorithmEd25519, pubOf(decisionKey)), keyID)
	// The decision key vouches for any configured operator the frontend authenticated.
	bob := aDecision()
	bob.Operator = "bob"
	_, err = testPolicy().Authorize(attest(t, bob, decisionKey, t0.Add(time.Minute)), "SECURITY_APPROVAL", t0)
	require.NoError(t, err)
}

// TestAttestationPreimage pins the pre-image, so that another language can sign decisions.
func TestAttestationPreimage(t *testing.T) {
	d := Decision{InvocationID: "inv-1", Decision: Approve, Rationale: "looks safe", Operator: "alice", Via: "signal"}
	pre, err := AttestationPreimage(d, 1795003200000)
	require.NoError(t, err)
	assert.Equal(t, "sw4rm-hitl-decision-v1\n"+
		"inv-1\n"+
		"approve\n"+
		"52371d4f0053c8e95a05f5d92f020b7d3950ba77afce94d1e2f8c1d140617f8b\n"+ // sha256("looks safe")
		"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"+ // sha256 of no patch
		"alice\n"+
		"signal\n"+
		"1795003200000\n", string(pre))
	// The vector of docs/hitl.md, computed independently: seed 0x02 × 32.
	signed := attest(t, d, aliceKey, time.UnixMilli(1795003200000))
	assert.Equal(t, "gTl3Dqh9F19Wo1Rmw0x+zMuNipG07jeiXfYPW4/Js5Q=", base64.StdEncoding.EncodeToString(pubOf(aliceKey)))
	assert.Equal(t, "ed25519:6a3803d5f059902a", signed.Attestation.KeyID)
	assert.Equal(t, "597K6V1BQIcF2Z2GHSOj9s5rb6Ws/ufNbI9Dneya8S/O5zOU0ciM0fqmWU1IlfuU1UTUvbcNdnTjsXNIHouNDw==",
		base64.StdEncoding.EncodeToString(signed.Attestation.Signature))
	for _, bad := range []func(*Decision){
		func(d *Decision) { d.Operator = "alice\nbob" },
		func(d *Decision) { d.Via = "signal\r" },
		func(d *Decision) { d.InvocationID = "a\nb" },
		func(d *Decision) { d.Decision = "approve\n" },
	} {
		x := d
		bad(&x)
		_, err := AttestationPreimage(x, 1)
		assert.ErrorContains(t, err, "line break")
		_, err = Attest(x, aliceKey, t0)
		assert.Error(t, err)
	}
}

// TestAttestationTamper: changing any signed field, the expiry, the signature or the key id
// after signing makes the workflow refuse the decision.
func TestAttestationTamper(t *testing.T) {
	signed := attest(t, aDecision(), decisionKey, t0.Add(DefaultAttestationTTL))
	p := testPolicy()
	_, err := p.Authorize(signed, "SECURITY_APPROVAL", t0)
	require.NoError(t, err, "the untampered decision is accepted")
	for name, tamper := range map[string]func(*Decision){
		"invocation_id": func(d *Decision) { d.InvocationID = "inv-2" },
		"decision":      func(d *Decision) { d.Decision = Approve },
		"decision case": func(d *Decision) { d.Decision = "MODIFY" },
		"rationale":     func(d *Decision) { d.Rationale += "!" },
		"patch":         func(d *Decision) { d.Patch = []byte(`{"tenant":13}`) },
		"no patch":      func(d *Decision) { d.Patch = nil },
		"operator":      func(d *Decision) { d.Operator = "bob" },
		"via":           func(d *Decision) { d.Via = "grpc" },
		"expires_at":    func(d *Decision) { d.Attestation.ExpiresAt += 60_000 },
		"signature":     func(d *Decision) { d.Attestation.Signature[0] ^= 1 },
		"short sig":     func(d *Decision) { d.Attestation.Signature = d.Attestation.Signature[:10] },
		"key_id":        func(d *Decision) { d.Attestation.KeyID = signing.KeyID(signing.AlgorithmEd25519, pubOf(aliceKey)) },
	} {
		d := signed
		a := *signed.Attestation
		a.Signature = append([]byte(nil), a.Signature...)
		d.Attestation = &a
		tamper(&d)
		_, err := p.Authorize(d, "SECURITY_APPROVAL", t0)
		require.Error(t, err, name)
		assert.True(t, strings.HasPrefix(err.Error(), "permission_denied: "), "%s: %v", name, err)
	}
}

// TestAttestationExpiry: an attestation is valid until its expiry, refused after it, and
// refused when it claims to last longer than MaxAttestationTTL.
func TestAttestationExpiry(t *testing.T) {
	p := testPolicy()
	signed := attest(t, aDecision(), decisionKey, t0.Add(10*time.Minute))
	_, err := p.Authorize(signed, "CONFLICT", t0.Add(10*time.Minute))
	require.NoError(t, err, "valid at its expiry")
	_, err = p.Authorize(signed, "CONFLICT", t0.Add(10*time.Minute+time.Millisecond))
	require.ErrorContains(t, err, "expired")
	assert.Contains(t, err.Error(), "sign the decision again")

	long := attest(t, aDecision(), decisionKey, t0.Add(MaxAttestationTTL+time.Minute))
	_, err = p.Authorize(long, "CONFLICT", t0)
	require.ErrorContains(t, err, "ahead")
	_, err = p.Authorize(long, "CONFLICT", t0.Add(2*time.Minute))
	require.NoError(t, err, "accepted once within the bound")
}

// TestAttestationWrongKey: a key the policy does not know, or the right key id over a
// signature by another key, is refused; so is an attested decision that also carries a
// token, and one without any attestation.
func TestAttestationWrongKey(t *testing.T) {
	p := testPolicy()
	_, err := p.Authorize(attest(t, aDecision(), strangerKey, t0.Add(time.Minute)), "CONFLICT", t0)
	require.ErrorContains(t, err, "neither the deployment's decision key nor a key of operator")

	forged := attest(t, aDecision(), strangerKey, t0.Add(time.Minute))
	forged.Attestation.KeyID = signing.KeyID(signing.AlgorithmEd25519, pubOf(decisionKey))
	_, err = p.Authorize(forged, "CONFLICT", t0)
	require.ErrorContains(t, err, "does not match")

	_, err = Policy{Operators: p.Operators}.Authorize(attest(t, aDecision(), decisionKey, t0.Add(time.Minute)), "CONFLICT", t0)
	require.Error(t, err, "without decision keys configured the decision key is unknown")

	withToken := attest(t, aDecision(), decisionKey, t0.Add(time.Minute))
	withToken.Token = "alice-token"
	_, err = p.Authorize(withToken, "CONFLICT", t0)
	require.ErrorContains(t, err, "carrying a token is refused")
	assert.NotContains(t, err.Error(), "alice-token")

	_, err = p.Authorize(aDecision(), "CONFLICT", t0)
	require.ErrorContains(t, err, "no attestation")

	unknown := aDecision()
	unknown.Operator = "mallory"
	_, err = p.Authorize(attest(t, unknown, decisionKey, t0.Add(time.Minute)), "CONFLICT", t0)
	require.ErrorContains(t, err, `unknown operator "mallory"`)
}

// TestOperatorKeyAttestation: an operator's own key vouches for that operator's decisions
// through the signal door, within the operator's reason types — not for another operator,
// nor for another door.
func TestOperatorKeyAttestation(t *testing.T) {
	p := testPolicy()
	d := aDecision()
	d.Via = "signal"
	keyID, err := p.Authorize(attest(t, d, aliceKey, t0.Add(time.Minute)), "SECURITY_APPROVAL", t0)
	require.NoError(t, err)
	assert.Equal(t, signing.KeyID(signing.AlgorithmEd25519, pubOf(aliceKey)), keyID)
	d.Via = ""
	_, err = p.Authorize(attest(t, d, aliceKey, t0.Add(time.Minute)), "SECURITY_APPROVAL", t0)
	require.NoError(t, err, "an empty via is the signal door")

	asBob := d
	asBob.Operator = "bob"
	_, err = p.Authorize(attest(t, asBob, aliceKey, t0.Add(time.Minute)), "SECURITY_APPROVAL", t0)
	require.ErrorContains(t, err, `nor a key of operator "bob"`, "alice's key does not speak for bob")

	viaCLI := d
	viaCLI.Via = "cli"
	_, err = p.Authorize(attest(t, viaCLI, aliceKey, t0.Add(time.Minute)), "SECURITY_APPROVAL", t0)
	require.ErrorContains(t, err, "signal door only")

	carol := d
	carol.Operator = "carol"
	signed := attest(t, carol, carolKey, t0.Add(time.Minute))
	_, err = p.Authorize(signed, "CONFLICT", t0)
	require.NoError(t, err)
	_, err = p.Authorize(signed, "SECURITY_APPROVAL", t0)
	require.ErrorContains(t, err, `operator "carol" may not decide SECURITY_APPROVAL`)
}

// TestAuthorizeTokenLegacy: the token form, kept for runs recorded before attestations, still
// checks the token and the reason types.
func TestAuthorizeTokenLegacy(t *testing.T) {
	p := testPolicy()
	d := Decision{InvocationID: "i", Decision: Approve, Rationale: "x", Operator: "alice", Token: "alice-token"}
	require.NoError(t, p.AuthorizeToken(d, "CONFLICT"))
	d.Token = "wrong"
	require.ErrorContains(t, p.AuthorizeToken(d, "CONFLICT"), "invalid token")
	d.Operator, d.Token = "carol", "carol-token"
	require.ErrorContains(t, p.AuthorizeToken(d, "SECURITY_APPROVAL"), "may not decide")
}

// TestDecisionJSONOmitsEmptyToken: the deprecated token field disappears from decisions that
// do not set it, and old decisions with a token still decode.
func TestDecisionJSONOmitsEmptyToken(t *testing.T) {
	b, err := json.Marshal(Decision{InvocationID: "i", Decision: Approve, Rationale: "x", Operator: "alice"})
	require.NoError(t, err)
	assert.NotContains(t, string(b), "token")
	var d Decision
	require.NoError(t, json.Unmarshal([]byte(`{"invocation_id":"i","decision":"approve","rationale":"x","operator":"alice","token":"t0k3n"}`), &d))
	assert.Equal(t, "t0k3n", d.Token)
	assert.Nil(t, d.Attestation)
}

// TestParseOperatorKeys: keys attach to configured operators, in base64 or hex, several per
// operator for rotation; unknown operators and malformed keys are refused; the input is not
// changed.
func TestParseOperatorKeys(t *testing.T) {
	ops, err := ParseOperators("alice=alice-token,carol=carol-token:CONFLICT")
	require.NoError(t, err)
	a, c := pubOf(aliceKey), pubOf(carolKey)
	spec := "alice=" + base64.StdEncoding.EncodeToString(a) + ", carol=" + hex.EncodeToString(c) +
		",alice=" + base64.RawURLEncoding.EncodeToString(pubOf(strangerKey)) + ",alice=" + base64.StdEncoding.EncodeToString(a)
	got, err := ParseOperatorKeys(ops, spec)
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, []ed25519.PublicKey{a, pubOf(strangerKey)}, got[0].PublicKeys, "two keys while rotating, the repeat once")
	assert.Equal(t, []ed25519.PublicKey{c}, got[1].PublicKeys)
	assert.Equal(t, []string{"CONFLICT"}, got[1].Reasons, "reason types are kept")
	assert.Empty(t, ops[0].PublicKeys, "the input is not changed")

	none, err := ParseOperatorKeys(ops, "")
	require.NoError(t, err)
	assert.Equal(t, ops, none)

	for name, bad := range map[string]string{
		"unknown operator": "mallory=" + base64.StdEncoding.EncodeToString(a),
		"short key":        "alice=" + base64.StdEncoding.EncodeToString(a[:31]),
		"not base64":       "alice=???",
		"no name":          "=" + base64.StdEncoding.EncodeToString(a),
		"no key":           "alice",
	} {
		_, err := ParseOperatorKeys(ops, bad)
		assert.Error(t, err, name)
	}
}

// TestPolicyWithoutTokens: the policy a workflow records keeps everything attested decisions
// need and no token hash, and the policy it was made from is not changed.
func TestPolicyWithoutTokens(t *testing.T) {
	p := testPolicy()
	q := p.WithoutTokens()
	for i, op := range q.Operators {
		assert.Empty(t, op.TokenSHA256)
		assert.Equal(t, p.Operators[i].Name, op.Name)
		assert.Equal(t, p.Operators[i].Reasons, op.Reasons)
		assert.Equal(t, p.Operators[i].PublicKeys, op.PublicKeys)
	}
	assert.Equal(t, p.DecisionKeys, q.DecisionKeys)
	assert.Equal(t, HashToken("alice-token"), p.Operators[0].TokenSHA256)
	_, err := q.Authorize(attest(t, aDecision(), decisionKey, t0.Add(time.Minute)), "SECURITY_APPROVAL", t0)
	require.NoError(t, err)
}
