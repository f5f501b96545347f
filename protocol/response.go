package protocol

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"mime"
	"strconv"
	"strings"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

// Request/response linkage (004 draft §1–§3, §5) travels as parameters of the canonical
// content_type (wire.ResponseTimeoutParam, wire.MaxAttemptsParam, wire.InResponseToParam), so
// no canonical message changes (§5.1) and every SDK that can set a MIME type can use it:
//
//	request:  content_type "application/json; sw4rm-response-timeout-ms=5000; sw4rm-max-attempts=3"
//	response: content_type "application/json; sw4rm-in-response-to=<request message_id>"
//
// A response is routed to the request's producer (the recipient metadata is not needed),
// moves the request to FULFILLED, and gets a deterministic idempotency token so duplicates
// are deduplicated (004 §5).

// DefaultMaxAttempts is the attempts of a response-required request when it names none.
const DefaultMaxAttempts = 3

// ResponsePolicy is a request's response requirement.
type ResponsePolicy struct {
	// Timeout is the per-attempt response timeout.
	Timeout time.Duration
	// MaxAttempts bounds the attempts (the first included).
	MaxAttempts int
}

// Linkage is what an envelope's content_type says about request/response.
type Linkage struct {
	// Request is set when the envelope requires a response.
	Request *ResponsePolicy
	// InResponseTo is the request's message_id when the envelope is a response.
	InResponseTo string
}

// ParseLinkage reads the linkage parameters of a content_type.
func ParseLinkage(contentType string) (Linkage, *Error) {
	var l Linkage
	if contentType == "" {
		return l, nil
	}
	_, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return l, nil // ValidateEnvelope reports malformed types
	}
	if v, ok := params[wire.ResponseTimeoutParam]; ok {
		ms, err := strconv.ParseUint(v, 10, 32)
		if err != nil || ms == 0 {
			return l, Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s=%q must be a positive number of milliseconds", wire.ResponseTimeoutParam, truncate(v))
		}
		p := &ResponsePolicy{Timeout: time.Duration(ms) * time.Millisecond, MaxAttempts: DefaultMaxAttempts}
		if v, ok := params[wire.MaxAttemptsParam]; ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 100 {
				return l, Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s=%q must be between 1 and 100", wire.MaxAttemptsParam, truncate(v))
			}
			p.MaxAttempts = n
		}
		l.Request = p
	}
	if v, ok := params[wire.InResponseToParam]; ok {
		if v == "" {
			return l, Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s must name the request's message_id", wire.InResponseToParam)
		}
		l.InResponseTo = v
	}
	if l.Request != nil && l.InResponseTo != "" {
		return l, Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "an envelope cannot both require a response and be one")
	}
	return l, nil
}

// ResponseToken is the deterministic idempotency token of the response that responder gives
// to the request first sent as requestOriginalID, in the §11.2 format
// {producer_id}:{operation_type}:{deterministic_hash}.
func ResponseToken(responder, requestOriginalID string) string {
	sum := sha256.Sum256([]byte(requestOriginalID))
	return responder + ":response:" + hex.EncodeToString(sum[:16])
}

// DedupKey returns the idempotency key of an envelope sent to recipient (§11.2): its token,
// else its sequence number with a fingerprint of what the message carries — only when the
// sequence number is set, since proto3 cannot tell an unset 0 from a real one — else "".
//
// The fingerprint (recipient, message type, content type and payload) is there because a
// reused sequence number is not always a retry. A retry repeats its message; a producer whose
// sequence numbers restart at 1, or never advance (the published JS SDK sends 1 on every
// envelope without a token), would otherwise have every later message refused as a
// duplicate of its first for the whole dedup window. So (producer_id, sequence_number)
// deduplicates retries, as §11.2 requires, and a different message under a used number is
// a different operation — as a token "computed over canonical parameters" would make it.
func DedupKey(env *commonpb.Envelope, recipient string) string {
	if t := env.GetIdempotencyToken(); t != "" {
		return "t:" + t
	}
	n := env.GetSequenceNumber()
	if n == 0 {
		return ""
	}
	h := sha256.New()
	for _, part := range [][]byte{[]byte(recipient), []byte(env.GetMessageType().String()), []byte(env.GetContentType()), env.GetPayload()} {
		var size [8]byte
		binary.BigEndian.PutUint64(size[:], uint64(len(part)))
		h.Write(size[:]) // length-prefixed, so that no two field splits hash alike
		h.Write(part)
	}
	return "s:" + strconv.FormatUint(n, 10) + ":" + hex.EncodeToString(h.Sum(nil)[:16])
}

// SequenceKey reports whether an idempotency key is a sequence-number key (not a token).
func SequenceKey(key string) bool { return strings.HasPrefix(key, "s:") }
