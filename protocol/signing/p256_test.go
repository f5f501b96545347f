package signing

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestP256SignVerify(t *testing.T) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	raw, err := priv.PublicKey.Bytes()
	require.NoError(t, err)
	pub, err := ParseP256PublicKey(raw)
	require.NoError(t, err)
	c := Call{Method: "/sw4rm.registry.RegistryService/Heartbeat", AgentID: "agent-p", Timestamp: time.UnixMilli(1767225600000), Nonce: "n0nce-0123456789", Body: []byte{0x0a, 0x01, 'p'}}
	md, err := SignP256(priv, c)
	require.NoError(t, err)
	parsed, sig, err := Parse(func(k string) string { return md[k] })
	require.NoError(t, err, "Parse reads a P-256 signature as it reads an Ed25519 one")
	parsed.Method, parsed.Body = c.Method, c.Body
	require.NoError(t, VerifyDigestP256(pub, parsed, sha256.Sum256(c.Body), sig))

	tampered := c
	tampered.Body = []byte{0x0a, 0x01, 'q'}
	require.ErrorIs(t, VerifyDigestP256(pub, tampered, sha256.Sum256(tampered.Body), sig), ErrBadSignature)
	sig[5] ^= 1
	require.ErrorIs(t, VerifyDigestP256(pub, c, sha256.Sum256(c.Body), sig), ErrBadSignature)

	_, err = ParseP256PublicKey(raw[:33])
	require.Error(t, err)
	bad := append([]byte(nil), raw...)
	bad[64] ^= 1 // not on the curve
	_, err = ParseP256PublicKey(bad)
	require.Error(t, err)
}
