package signing

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"math/big"
	"strconv"

	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

// ECDSA P-256 is §6.2's alternative for deployments that need a NIST-approved algorithm. The
// pre-image, the metadata and the nonce rules are the same as Ed25519's; only the key and the
// signature differ:
//
//   - the public key (AgentDescriptor.public_key) is the 65-byte uncompressed SEC 1 point
//     (0x04 ‖ X ‖ Y), what WebCrypto, OpenSSL and Go export;
//   - the signature is ECDSA with SHA-256 over the pre-image, sent as the 64-byte fixed-width
//     r ‖ s (IEEE P1363, WebCrypto's format), base64url without padding — the same length as an
//     Ed25519 signature, so Parse reads both.

// P256PublicKeySize is the length of an uncompressed P-256 public key.
const P256PublicKeySize = 65

// ParseP256PublicKey reads a 65-byte uncompressed P-256 public key.
func ParseP256PublicKey(b []byte) (*ecdsa.PublicKey, error) {
	if len(b) != P256PublicKeySize {
		return nil, fmt.Errorf("a P-256 public key is %d bytes (uncompressed SEC 1), not %d", P256PublicKeySize, len(b))
	}
	return ecdsa.ParseUncompressedPublicKey(elliptic.P256(), b)
}

// SignP256 signs c with an ECDSA P-256 key and returns the metadata to send with the call.
func SignP256(priv *ecdsa.PrivateKey, c Call) (map[string]string, error) {
	digest := sha256.Sum256(Preimage(c))
	r, s, err := ecdsa.Sign(rand.Reader, priv, digest[:])
	if err != nil {
		return nil, err
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return map[string]string{
		wire.SignatureAgentKey:     c.AgentID,
		wire.SignatureTimestampKey: strconv.FormatInt(c.Timestamp.UnixMilli(), 10),
		wire.SignatureNonceKey:     c.Nonce,
		wire.SignatureKey:          base64.RawURLEncoding.EncodeToString(sig),
	}, nil
}

// VerifyDigestP256 checks a P-256 signature (r ‖ s) over c, whose body has the given digest.
func VerifyDigestP256(pub *ecdsa.PublicKey, c Call, digest [sha256.Size]byte, sig []byte) error {
	if pub == nil || len(sig) != 64 {
		return ErrBadSignature
	}
	h := sha256.Sum256(DigestPreimage(c, digest))
	r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
	if !ecdsa.Verify(pub, h[:], r, s) {
		return ErrBadSignature
	}
	return nil
}
