package protocol_test

import (
	"bytes"
	"encoding/json"
	"mime"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// Seed values shared by the fuzz targets. The RFC examples come from Appendix D (C.1, C.3),
// whose ids are not UUIDs and whose envelopes carry no content_length.
const (
	fuzzUUID     = "5a1d9c8e-6b3f-4a87-8f5e-91a2c0ab1234"
	fuzzCorrUUID = "7f3f41a2-2017-4b8f-9b8b-2ad3caaee001"
	rfcC1Payload = `{"task_type":"CreateTicket","title":"Fix header overlap"}`
	rfcC3Payload = `{"ack_for_message_id":"mX","ack_stage":"REJECTED","error_code":"buffer_full"}`
	rfc13Payload = `{"ack_for_message_id":"d2b6a7a9-0e0c-4f44-b2d9-6e9e24f0abcd","ack_stage":"REJECTED","error_code":"BUFFER_FULL","note":"Inbound buffer capacity exceeded for agent=agent-42"}`
)

// checkProtocolError asserts the shape every rejection must have: a defined, non-zero
// error_code and an Error() of the form "<code_name>: <message>".
func checkProtocolError(t *testing.T, what string, err *protocol.Error) {
	t.Helper()
	if _, defined := commonpb.ErrorCode_name[int32(err.Code)]; !defined || err.Code == commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED {
		t.Fatalf("%s: error code %d is not a defined, non-zero ErrorCode (%q)", what, int32(err.Code), err.Msg)
	}
	if prefix := protocol.CodeName(err.Code) + ": "; !strings.HasPrefix(err.Error(), prefix) {
		t.Fatalf("%s: Error() %q does not start with %q", what, err.Error(), prefix)
	}
}

func sameError(a, b *protocol.Error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Code == b.Code && a.Msg == b.Msg
}

func FuzzValidateEnvelope(f *testing.F) {
	type seed struct {
		messageID, producerID, correlationID string
		messageType                          int32
		contentType                          string
		contentLength                        uint64
		payload                              []byte
		maxPayload                           int
	}
	data := int32(commonpb.MessageType_DATA)
	ack := int32(commonpb.MessageType_ACKNOWLEDGEMENT)
	jsonPayload := []byte(`{"a":1}`)
	validAck := []byte(`{"ack_for_message_id":"` + fuzzUUID + `","ack_stage":"RECEIVED"}`)
	seeds := []seed{
		// Valid DATA JSON and valid ACKs (including the §13 NACK example and RFC C.3 with real ids).
		{fuzzUUID, "agent-a", "wf-1111", data, "application/json", 7, jsonPayload, 0},
		{fuzzUUID, "agent-a", fuzzCorrUUID, ack, "application/json", uint64(len(validAck)), validAck, 0},
		{fuzzUUID, protocol.SchedulerID, fuzzCorrUUID, ack, "application/json", uint64(len(rfc13Payload)), []byte(rfc13Payload), 0},
		{fuzzUUID, "scheduler", "wf-3333", ack, "application/json; charset=utf-8", uint64(len(rfcC3Payload)), []byte(rfcC3Payload), 0},
		// No payload: content_type may be absent.
		{fuzzUUID, "agent-a", "wf-1111", int32(commonpb.MessageType_HEARTBEAT), "", 0, nil, 0},
		// Everything empty / zero.
		{"", "", "", 0, "", 0, nil, 0},
		// RFC Appendix D C.1 as printed (non-UUID id, no content_length) and fixed up.
		{"msg001", "cli", "wf-1111", data, "application/json", 0, []byte(rfcC1Payload), 0},
		{fuzzUUID, "cli", "wf-1111", data, "application/json", uint64(len(rfcC1Payload)), []byte(rfcC1Payload), 0},
		// RFC Appendix D C.3 as printed (non-UUID id, no content_length).
		{"ack_rej_77", "scheduler", "wf-3333", ack, "application/json", 0, []byte(rfcC3Payload), 0},
		// Almost-UUIDs.
		{"{" + fuzzUUID + "}", "agent-a", "wf-1111", data, "application/json", 7, jsonPayload, 0},
		{"urn:uuid:" + fuzzUUID, "agent-a", "wf-1111", data, "application/json", 7, jsonPayload, 0},
		{strings.ReplaceAll(fuzzUUID, "-", ""), "agent-a", "wf-1111", data, "application/json", 7, jsonPayload, 0},
		{strings.ToUpper(fuzzUUID), "agent-a", "wf-1111", data, "application/json", 7, jsonPayload, 0},
		{"5a1d9c8e-6b3f-4a87-8f5e-91a2c0ab123g", "agent-a", "wf-1111", data, "application/json", 7, jsonPayload, 0},
		// Mismatched content_length both ways, and a length with no payload.
		{fuzzUUID, "agent-a", "wf-1111", data, "application/json", 3, jsonPayload, 0},
		{fuzzUUID, "agent-a", "wf-1111", data, "application/json", 8, jsonPayload, 0},
		{fuzzUUID, "agent-a", "wf-1111", data, "application/json", 7, nil, 0},
		{fuzzUUID, "agent-a", "wf-1111", data, "application/json", ^uint64(0), jsonPayload, 0},
		// Oversize against a small configured limit; exactly at the limit; negative limit.
		{fuzzUUID, "agent-a", "wf-1111", data, "application/json", 7, jsonPayload, 3},
		{fuzzUUID, "agent-a", "wf-1111", data, "application/json", 7, jsonPayload, 7},
		{fuzzUUID, "agent-a", "wf-1111", data, "application/json", 7, jsonPayload, -1},
		// Weird MIME types.
		{fuzzUUID, "agent-a", "wf-1111", data, "json", 7, jsonPayload, 0},
		{fuzzUUID, "agent-a", "wf-1111", data, "image/", 7, jsonPayload, 0},
		{fuzzUUID, "agent-a", "wf-1111", data, "/json", 7, jsonPayload, 0},
		{fuzzUUID, "agent-a", "wf-1111", data, "*/*", 7, jsonPayload, 0},
		{fuzzUUID, "agent-a", "wf-1111", data, "text/plain; charset=\"utf-8\"; format=flowed", 7, jsonPayload, 0},
		{fuzzUUID, "agent-a", "wf-1111", data, "text/plain; charset*=utf-8''%E2%82%AC", 7, jsonPayload, 0},
		{fuzzUUID, "agent-a", "wf-1111", data, "text/plain; charset=", 7, jsonPayload, 0},
		{fuzzUUID, "agent-a", "wf-1111", data, "application/json;;", 7, jsonPayload, 0},
		{fuzzUUID, "agent-a", "wf-1111", data, "APPLICATION/JSON", 7, jsonPayload, 0},
		{fuzzUUID, "agent-a", "wf-1111", ack, "text/plain", uint64(len(validAck)), validAck, 0},
		// Message types: undefined, negative, every ACK with a non-ACK payload.
		{fuzzUUID, "agent-a", "wf-1111", 42, "application/json", 7, jsonPayload, 0},
		{fuzzUUID, "agent-a", "wf-1111", -1, "application/json", 7, jsonPayload, 0},
		{fuzzUUID, "agent-a", "wf-1111", ack, "application/json", 7, jsonPayload, 0},
		{fuzzUUID, "agent-a", "wf-1111", int32(commonpb.MessageType_TOOL_ERROR), "application/protobuf", 3, []byte{0x08, 0x96, 0x01}, 0},
		// Unicode and over-long identifiers.
		{fuzzUUID, "агент-α", "流程-1111", data, "text/plain; charset=utf-8", uint64(len("héllo 🌍")), []byte("héllo 🌍"), 0},
		{fuzzUUID, "agent-a", "wf-1111", data, "text/plain; charset=utf-8", 9, []byte("héllo 🌍")[:9], 0},
		{fuzzUUID, "agent\x00a", "wf\xff\xfe", data, "text/plain", 2, []byte{0xff, 0xfe}, 0},
		{fuzzUUID, strings.Repeat("p", 257), "wf-1111", data, "application/json", 7, jsonPayload, 0},
		{fuzzUUID, "agent-a", strings.Repeat("c", 256), data, "application/json", 7, jsonPayload, 0},
		{fuzzUUID, "agent-a", strings.Repeat("c", 257), data, "application/json", 7, jsonPayload, 0},
		{fuzzUUID, "", "wf-1111", data, "application/json", 7, jsonPayload, 0},
		{fuzzUUID, "agent-a", "", data, "application/json", 7, jsonPayload, 0},
		{strings.Repeat(fuzzUUID, 3), "agent-a", "wf-1111", data, "application/json", 7, jsonPayload, 0},
	}
	for _, s := range seeds {
		f.Add(s.messageID, s.producerID, s.correlationID, s.messageType, s.contentType, s.contentLength, s.payload, s.maxPayload)
	}

	f.Fuzz(func(t *testing.T, messageID, producerID, correlationID string, messageType int32, contentType string, contentLength uint64, payload []byte, maxPayload int) {
		build := func() *commonpb.Envelope {
			return &commonpb.Envelope{
				MessageId:     messageID,
				ProducerId:    producerID,
				CorrelationId: correlationID,
				MessageType:   commonpb.MessageType(messageType),
				ContentType:   contentType,
				ContentLength: contentLength,
				Payload:       bytes.Clone(payload),
			}
		}
		lim := protocol.Limits{MaxPayloadBytes: maxPayload}
		env := build()
		err := protocol.ValidateEnvelope(env, lim)

		// Deterministic, and the envelope is left untouched.
		if again := protocol.ValidateEnvelope(build(), lim); !sameError(err, again) {
			t.Fatalf("validation is not deterministic: %v then %v", err, again)
		}
		if env.GetMessageId() != messageID || env.GetContentType() != contentType ||
			env.GetContentLength() != contentLength || !bytes.Equal(env.GetPayload(), payload) {
			t.Fatalf("ValidateEnvelope modified the envelope")
		}

		if err != nil {
			checkProtocolError(t, "ValidateEnvelope", err)
			return
		}

		// A nil result implies the documented invariants.
		if _, perr := uuid.Parse(messageID); perr != nil || len(messageID) != 36 {
			t.Fatalf("accepted message_id %q that is not a 36-char UUID (%v)", messageID, perr)
		}
		if producerID == "" || correlationID == "" {
			t.Fatalf("accepted empty producer_id %q / correlation_id %q", producerID, correlationID)
		}
		mt := commonpb.MessageType(messageType)
		if _, defined := commonpb.MessageType_name[messageType]; !defined || mt == commonpb.MessageType_MESSAGE_TYPE_UNSPECIFIED {
			t.Fatalf("accepted message_type %d", messageType)
		}
		if contentLength != uint64(len(payload)) {
			t.Fatalf("accepted content_length %d for %d payload bytes", contentLength, len(payload))
		}
		if len(payload) > 0 {
			if contentType == "" {
				t.Fatalf("accepted a %d-byte payload without content_type", len(payload))
			}
			if _, _, merr := mime.ParseMediaType(contentType); merr != nil {
				t.Fatalf("accepted unparsable content_type %q: %v", contentType, merr)
			}
		}
		limit := maxPayload
		if limit <= 0 {
			limit = protocol.DefaultMaxPayloadBytes
		}
		if len(payload) > limit {
			t.Fatalf("accepted a %d-byte payload over the %d-byte limit", len(payload), limit)
		}
		var ack protocol.AckPayload
		if mt == commonpb.MessageType_ACKNOWLEDGEMENT {
			var aerr *protocol.Error
			if ack, aerr = protocol.ParseAck(env); aerr != nil {
				t.Fatalf("accepted an ACKNOWLEDGEMENT whose payload ParseAck rejects: %v", aerr)
			}
		}

		// Resolve on a valid envelope never panics and follows the addressing rule.
		for _, recipient := range []string{"", "agent-b", producerID} {
			route, rerr := protocol.Resolve(env, recipient)
			if rerr != nil {
				checkProtocolError(t, "Resolve", rerr)
			}
			switch {
			case mt == commonpb.MessageType_ACKNOWLEDGEMENT:
				if rerr != nil || route != (protocol.Route{AckFor: ack.AckForMessageID}) {
					t.Fatalf("Resolve(ACK, %q) = %+v, %v; want AckFor %q", recipient, route, rerr, ack.AckForMessageID)
				}
			case recipient == "" || recipient == producerID:
				if rerr == nil || rerr.Code != commonpb.ErrorCode_NO_ROUTE {
					t.Fatalf("Resolve(%q) = %+v, %v; want no_route", recipient, route, rerr)
				}
			default:
				if rerr != nil || route != (protocol.Route{Recipient: recipient}) {
					t.Fatalf("Resolve(%q) = %+v, %v; want unicast", recipient, route, rerr)
				}
			}
		}
	})
}

func FuzzParseAck(f *testing.F) {
	seeds := []struct {
		payload     string
		contentType string
	}{
		// Valid: enum names and the RFC's lower-case spellings.
		{`{"ack_for_message_id":"` + fuzzUUID + `","ack_stage":"RECEIVED"}`, "application/json"},
		{`{"ack_for_message_id":"m1","ack_stage":"FULFILLED","note":"done"}`, "application/json"},
		{`{"ack_for_message_id":"m1","ack_stage":"read"}`, "application/json; charset=utf-8"},
		{rfcC3Payload, "application/json"},
		{`{"ack_for_message_id":"mX","ack_stage":"rejected","error_code":"buffer_full"}`, "application/json"},
		{rfc13Payload, "application/json"},
		{`{"ack_for_message_id":"m1","ack_stage":"Timed_Out","error_code":"Ack_Timeout"}`, "Application/JSON"},
		{`{"ack_for_message_id":"m1","ack_stage":"FAILED","error_code":"INTERNAL_ERROR","note":"boom"}`, "application/json"},
		// Enum numbers, as the published JS and Python SDKs write them.
		{`{"ack_for_message_id":"m1","ack_stage":3,"error_code":0}`, "application/json"},
		{`{"ack_for_message_id":"m1","ack_stage":2}`, "application/json"},
		{`{"ack_for_message_id":"m1","ack_stage":4,"error_code":6,"note":"bad"}`, "application/json"},
		{`{"ack_for_message_id":"m1","ack_stage":"FAILED","error_code":"ERROR_CODE_UNSPECIFIED"}`, "application/json"},
		{`{"ack_for_message_id":"m1","ack_stage":"REJECTED","error_code":""}`, "application/json"},
		{`{"ack_for_message_id":"m1","ack_stage":"READ","extra":{"nested":[1,2,{"x":null}]}}`, "application/json"},
		{`{"ACK_FOR_MESSAGE_ID":"m1","Ack_Stage":"READ"}`, "application/json"},
		{`{"ack_for_message_id":"m1","ack_stage":"READ","ack_stage":"FAILED"}`, "application/json"},
		{`{"ack_for_message_id":"m\u00e9\ud800<&>\u2028","ack_stage":"READ","note":"\u0000\"\\"}`, "application/json"},
		{"{\"ack_for_message_id\":\"m\xff\xfe\",\"ack_stage\":\"READ\",\"note\":\"\xc3\"}", "application/json"},
		// Missing fields.
		{`{}`, "application/json"},
		{`{"ack_stage":"READ"}`, "application/json"},
		{`{"ack_for_message_id":"m1"}`, "application/json"},
		{`{"ack_for_message_id":"","ack_stage":"READ"}`, "application/json"},
		// Wrong types and values.
		{`{"ack_for_message_id":1,"ack_stage":"READ"}`, "application/json"},
		{`{"ack_for_message_id":"m1","ack_stage":2.5}`, "application/json"},
		{`{"ack_for_message_id":"m1","ack_stage":"READ","error_code":true}`, "application/json"},
		{`{"ack_for_message_id":"m1","ack_stage":7,"error_code":-1}`, "application/json"},
		{`{"ack_for_message_id":"m1","ack_stage":"READ","note":{"a":1}}`, "application/json"},
		{`{"ack_for_message_id":null,"ack_stage":null}`, "application/json"},
		{`{"ack_for_message_id":"m1","ack_stage":"ACK_STAGE_UNSPECIFIED"}`, "application/json"},
		{`{"ack_for_message_id":"m1","ack_stage":"DONE"}`, "application/json"},
		{`{"ack_for_message_id":"m1","ack_stage":"FAILED","error_code":"OOPS"}`, "application/json"},
		// Not an object / nested junk / truncated.
		{`null`, "application/json"},
		{`[]`, "application/json"},
		{`"READ"`, "application/json"},
		{`[{"ack_for_message_id":"m1","ack_stage":"READ"}]`, "application/json"},
		{`{"a":{"b":{"c":{"d":[[[[[[{}]]]]]]}}}}`, "application/json"},
		{`{"ack_for_message_id":"m1","ack_stage":"READ"`, "application/json"},
		{`{"ack_for_message_id":"m1","ack_stage":"READ"} trailing`, "application/json"},
		{``, "application/json"},
		// Wrong or malformed content types.
		{`{"ack_for_message_id":"m1","ack_stage":"READ"}`, "text/plain"},
		{`{"ack_for_message_id":"m1","ack_stage":"READ"}`, ""},
		{`{"ack_for_message_id":"m1","ack_stage":"READ"}`, "application/json;"},
		{`{"ack_for_message_id":"m1","ack_stage":"READ"}`, "application/json; charset"},
	}
	for _, s := range seeds {
		f.Add([]byte(s.payload), s.contentType)
	}

	f.Fuzz(func(t *testing.T, payload []byte, contentType string) {
		in := &commonpb.Envelope{MessageType: commonpb.MessageType_ACKNOWLEDGEMENT, ContentType: contentType, Payload: payload}
		got, err := protocol.ParseAck(in)
		if err != nil {
			checkProtocolError(t, "ParseAck", err)
			if got != (protocol.AckPayload{}) {
				t.Fatalf("ParseAck returned %+v alongside error %v", got, err)
			}
			return
		}
		if mt, _, merr := mime.ParseMediaType(contentType); merr != nil || mt != protocol.AckContentType {
			t.Fatalf("accepted content_type %q (%q, %v)", contentType, mt, merr)
		}
		if _, defined := commonpb.AckStage_name[int32(got.Stage)]; !defined || got.Stage == commonpb.AckStage_ACK_STAGE_UNSPECIFIED {
			t.Fatalf("accepted ack_stage %d", int32(got.Stage))
		}
		if _, defined := commonpb.ErrorCode_name[int32(got.ErrorCode)]; !defined {
			t.Fatalf("accepted error_code %d", int32(got.ErrorCode))
		}
		if got.AckForMessageID == "" {
			t.Fatalf("accepted an empty ack_for_message_id")
		}

		// Round trip through the envelope the server would build.
		env := protocol.NewAckEnvelope(protocol.AckEnvelopeInput{
			MessageID: fuzzUUID, ProducerID: protocol.SchedulerID, CorrelationID: fuzzCorrUUID, Ack: got,
		})
		if env.GetMessageType() != commonpb.MessageType_ACKNOWLEDGEMENT || env.GetContentType() != protocol.AckContentType ||
			env.GetContentLength() != uint64(len(env.GetPayload())) {
			t.Fatalf("NewAckEnvelope built an inconsistent envelope: %v", env)
		}
		again, err := protocol.ParseAck(env)
		if err != nil {
			t.Fatalf("ParseAck(NewAckEnvelope(%+v)) failed: %v; payload %s", got, err, env.GetPayload())
		}
		if again != got {
			t.Fatalf("round trip changed the ACK: %+v became %+v; payload %s", got, again, env.GetPayload())
		}
		if verr := protocol.ValidateEnvelope(env, protocol.Limits{MaxPayloadBytes: len(env.GetPayload())}); verr != nil {
			t.Fatalf("NewAckEnvelope built an envelope ValidateEnvelope rejects: %v", verr)
		}

		// The wire JSON has exactly the documented keys, with enum names.
		var wire map[string]any
		if jerr := json.Unmarshal(env.GetPayload(), &wire); jerr != nil {
			t.Fatalf("ACK payload %s is not a JSON object: %v", env.GetPayload(), jerr)
		}
		want := map[string]string{"ack_for_message_id": got.AckForMessageID, "ack_stage": got.Stage.String()}
		if got.ErrorCode != commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED {
			want["error_code"] = got.ErrorCode.String()
		}
		if got.Note != "" {
			want["note"] = got.Note
		}
		if len(wire) != len(want) {
			t.Fatalf("ACK payload %s has keys %v, want exactly %v", env.GetPayload(), keys(wire), keys(want))
		}
		for k, v := range want {
			if s, ok := wire[k].(string); !ok || s != v {
				t.Fatalf("ACK payload %s: %s = %#v, want %q", env.GetPayload(), k, wire[k], v)
			}
		}
		if _, ok := commonpb.AckStage_value[want["ack_stage"]]; !ok {
			t.Fatalf("ack_stage %q is not an AckStage enum name", want["ack_stage"])
		}
		if code, ok := want["error_code"]; ok {
			if _, ok := commonpb.ErrorCode_value[code]; !ok {
				t.Fatalf("error_code %q is not an ErrorCode enum name", code)
			}
		}
	})
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
