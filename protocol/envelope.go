package protocol

import (
	"fmt"
	"mime"
	"strings"

	"github.com/google/uuid"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hlc"
)

// DefaultMaxPayloadBytes is the payload limit when none is configured (§5.4 asks for a
// configurable maximum; oversize payloads are rejected with oversize_payload).
const DefaultMaxPayloadBytes = 1 << 20

// maxIDLength bounds identifiers so a hostile producer cannot make the store index megabytes.
const maxIDLength = 256

// Limits are the configurable admission limits applied by ValidateEnvelope.
type Limits struct {
	// MaxPayloadBytes is the largest payload admitted; zero means DefaultMaxPayloadBytes.
	MaxPayloadBytes int
}

// ValidateEnvelope checks the fields §11 requires of every message: message_id (a UUID, new
// per attempt, §11.3), producer_id, correlation_id (§5.2), a defined message_type, and
// content_type plus a content_length equal to the payload's size whenever a payload is present
// (§5.4). It returns a *Error with VALIDATION_ERROR, UNSUPPORTED_MESSAGE_TYPE or
// OVERSIZE_PAYLOAD, or nil.
// sequence_number and retry_count are required by §11 too, but zero is a legal value for both,
// so proto3 cannot tell "absent" from "zero" and they are not checked here.
func ValidateEnvelope(env *commonpb.Envelope, lim Limits) *Error {
	if env == nil {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "envelope is required (SendMessageRequest.msg is empty)")
	}
	if env.GetMessageId() == "" {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "message_id is required (§11)")
	}
	if _, err := uuid.Parse(env.GetMessageId()); err != nil || len(env.GetMessageId()) != 36 {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "message_id %q is not a UUID (§11.3: a UUIDv4 per attempt)", truncate(env.GetMessageId()))
	}
	if env.GetProducerId() == "" {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "producer_id is required (§11)")
	}
	if len(env.GetProducerId()) > maxIDLength {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "producer_id is longer than %d bytes", maxIDLength)
	}
	if env.GetCorrelationId() == "" {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "correlation_id is required (§5.2, §11)")
	}
	if len(env.GetCorrelationId()) > maxIDLength {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "correlation_id is longer than %d bytes", maxIDLength)
	}
	if len(env.GetIdempotencyToken()) > 4*maxIDLength {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "idempotency_token is longer than %d bytes", 4*maxIDLength)
	}
	if ts := env.GetHlcTimestamp(); ts != "" {
		// §4, §5.2: an HLC the producer sends is merged into the router's clock, so it must
		// be one; the router stamps the envelopes that come without.
		if _, err := hlc.Parse(ts); err != nil {
			return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "hlc_timestamp: %v (§4: <Unix microseconds>.<logical counter>.<node>)", err)
		}
	}
	mt := env.GetMessageType()
	if mt == commonpb.MessageType_MESSAGE_TYPE_UNSPECIFIED {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "message_type is required (§11: one of CONTROL, DATA, HEARTBEAT, ...)")
	}
	if _, known := commonpb.MessageType_name[int32(mt)]; !known {
		return Errorf(commonpb.ErrorCode_UNSUPPORTED_MESSAGE_TYPE, "message_type %d is not defined (§11)", int32(mt))
	}
	maxPayload := lim.MaxPayloadBytes
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayloadBytes
	}
	n := len(env.GetPayload())
	if n > 0 || env.GetContentLength() > 0 {
		if env.GetContentType() == "" {
			return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "content_type is required when a payload is present (§11, §12)")
		}
		if _, err := parseMIME(env.GetContentType()); err != nil {
			return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "content_type %q is not a MIME type like application/json: %v (§12)", truncate(env.GetContentType()), err)
		}
		if env.GetContentLength() != uint64(n) {
			return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "content_length %d does not match the payload's %d bytes (§5.4)", env.GetContentLength(), n)
		}
		if n > maxPayload {
			return Errorf(commonpb.ErrorCode_OVERSIZE_PAYLOAD, "payload of %d bytes exceeds the %d-byte limit (§5.4)", n, maxPayload)
		}
	}
	if mt == commonpb.MessageType_ACKNOWLEDGEMENT {
		if _, err := ParseAck(env); err != nil {
			return err
		}
	}
	return nil
}

// parseMIME parses "type/subtype[; params]" and returns the lower-cased media type; unlike
// mime.ParseMediaType alone it insists on both halves.
func parseMIME(s string) (string, error) {
	mt, _, err := mime.ParseMediaType(s)
	if err != nil {
		return "", err
	}
	typ, sub, ok := strings.Cut(mt, "/")
	if !ok || typ == "" || sub == "" {
		return "", fmt.Errorf("want type/subtype")
	}
	return mt, nil
}

// truncate keeps error messages short when echoing hostile input.
func truncate(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "…"
}
