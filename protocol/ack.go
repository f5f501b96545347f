package protocol

import (
	"encoding/json"
	"fmt"
	"mime"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
)

// AckContentType is the content type of ACKNOWLEDGEMENT envelopes (wire contract).
const AckContentType = "application/json"

// AckPayload is the JSON payload of an ACKNOWLEDGEMENT envelope:
// {"ack_for_message_id","ack_stage","error_code","note"}. The server writes the stage and the
// code as their enum names, as the RFC's example does (§13). Parsing accepts the names, the
// RFC's lower-case spelling ("buffer_full", C.3) and the enum numbers, which the published JS
// and Python SDKs write ({"ack_stage":3,"error_code":0}).
type AckPayload struct {
	// AckForMessageID is the message_id being acknowledged.
	AckForMessageID string
	// Stage is the lifecycle stage reported.
	Stage commonpb.AckStage
	// ErrorCode accompanies REJECTED, FAILED and TIMED_OUT.
	ErrorCode commonpb.ErrorCode
	// Note is free text.
	Note string
}

// ackJSON is the wire form the server writes.
type ackJSON struct {
	AckForMessageID string `json:"ack_for_message_id"`
	AckStage        string `json:"ack_stage"`
	ErrorCode       string `json:"error_code,omitempty"`
	Note            string `json:"note,omitempty"`
}

// ackInJSON is the wire form the server reads: the enums as names or numbers.
type ackInJSON struct {
	AckForMessageID string   `json:"ack_for_message_id"`
	AckStage        enumJSON `json:"ack_stage"`
	ErrorCode       enumJSON `json:"error_code"`
	Note            string   `json:"note"`
}

// enumJSON is an enum field written either as a JSON string (a name) or as a JSON integer (a
// number); null and "" mean absent.
type enumJSON struct {
	name     string
	number   int32
	isNumber bool
}

// UnmarshalJSON accepts a string or an integer that fits an enum (int32, as in protobuf).
func (e *enumJSON) UnmarshalJSON(b []byte) error {
	*e = enumJSON{}
	switch {
	case string(b) == "null":
		return nil
	case len(b) > 0 && b[0] == '"':
		return json.Unmarshal(b, &e.name)
	}
	if err := json.Unmarshal(b, &e.number); err != nil {
		return fmt.Errorf("want an enum name (a string) or an enum number (an integer), got %s", truncate(string(b)))
	}
	e.isNumber = true
	return nil
}

// String renders the field for error messages.
func (e enumJSON) String() string {
	if e.isNumber {
		return strconv.Itoa(int(e.number))
	}
	return strconv.Quote(truncate(e.name))
}

// resolve looks the field up by name (case-insensitively, for the RFC's lower-case spelling)
// or by number; ok is false when it names no value of the enum.
func (e enumJSON) resolve(values map[string]int32, names map[int32]string) (v int32, ok bool) {
	if e.isNumber {
		_, ok = names[e.number]
		return e.number, ok
	}
	v, ok = values[asciiUpper(e.name)]
	return v, ok
}

// absent reports whether the field was left out (or null, or "").
func (e enumJSON) absent() bool { return !e.isNumber && e.name == "" }

// MarshalJSON renders the wire form with enum names.
func (a AckPayload) MarshalJSON() ([]byte, error) {
	j := ackJSON{AckForMessageID: a.AckForMessageID, AckStage: a.Stage.String(), Note: a.Note}
	if a.ErrorCode != commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED {
		j.ErrorCode = a.ErrorCode.String()
	}
	return json.Marshal(j)
}

// ParseAck decodes and checks the ACK payload of an ACKNOWLEDGEMENT envelope.
func ParseAck(env *commonpb.Envelope) (AckPayload, *Error) {
	if mt, _, err := mime.ParseMediaType(env.GetContentType()); err != nil || mt != AckContentType {
		return AckPayload{}, Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "ACKNOWLEDGEMENT content_type must be %s, got %q", AckContentType, truncate(env.GetContentType()))
	}
	var j ackInJSON
	if err := json.Unmarshal(env.GetPayload(), &j); err != nil {
		return AckPayload{}, Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "ACKNOWLEDGEMENT payload is not the ACK JSON object: %v", err)
	}
	if j.AckForMessageID == "" {
		return AckPayload{}, Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "ACKNOWLEDGEMENT payload needs ack_for_message_id")
	}
	stage, ok := j.AckStage.resolve(commonpb.AckStage_value, commonpb.AckStage_name)
	if !ok || stage == int32(commonpb.AckStage_ACK_STAGE_UNSPECIFIED) {
		return AckPayload{}, Errorf(commonpb.ErrorCode_VALIDATION_ERROR,
			"ack_stage %s is not one of RECEIVED (1), READ (2), FULFILLED (3), REJECTED (4), FAILED (5), TIMED_OUT (6)", j.AckStage)
	}
	var code int32
	if !j.ErrorCode.absent() {
		if code, ok = j.ErrorCode.resolve(commonpb.ErrorCode_value, commonpb.ErrorCode_name); !ok {
			return AckPayload{}, Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "error_code %s is not a SW4RM error code (a name such as BUFFER_FULL, or its number)", j.ErrorCode)
		}
	}
	return AckPayload{
		AckForMessageID: j.AckForMessageID,
		Stage:           commonpb.AckStage(stage),
		ErrorCode:       commonpb.ErrorCode(code),
		Note:            j.Note,
	}, nil
}

// stageStates pairs each ACK stage with the lifecycle state it reports (§11, App. C).
var stageStates = [...]struct {
	stage commonpb.AckStage
	state commonpb.EnvelopeState
}{
	{commonpb.AckStage_RECEIVED, commonpb.EnvelopeState_ENVELOPE_STATE_RECEIVED},
	{commonpb.AckStage_READ, commonpb.EnvelopeState_ENVELOPE_STATE_READ},
	{commonpb.AckStage_FULFILLED, commonpb.EnvelopeState_ENVELOPE_STATE_FULFILLED},
	{commonpb.AckStage_REJECTED, commonpb.EnvelopeState_ENVELOPE_STATE_REJECTED},
	{commonpb.AckStage_FAILED, commonpb.EnvelopeState_ENVELOPE_STATE_FAILED},
	{commonpb.AckStage_TIMED_OUT, commonpb.EnvelopeState_ENVELOPE_STATE_TIMED_OUT},
}

// asciiUpper upper-cases ASCII letters only: strings.ToUpper would turn look-alikes such as
// the dotless ı into I and accept "tımed_out" as TIMED_OUT.
func asciiUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// StateForStage maps an ACK stage onto the message lifecycle state it reports.
func StateForStage(s commonpb.AckStage) commonpb.EnvelopeState {
	for _, p := range stageStates {
		if p.stage == s {
			return p.state
		}
	}
	return commonpb.EnvelopeState_ENVELOPE_STATE_UNSPECIFIED
}

// StageForState is the inverse of StateForStage, used when the router reports a transition
// it made itself (for example RECEIVED on delivery confirmation).
func StageForState(s commonpb.EnvelopeState) commonpb.AckStage {
	for _, p := range stageStates {
		if p.state == s {
			return p.stage
		}
	}
	return commonpb.AckStage_ACK_STAGE_UNSPECIFIED
}

// AckEnvelopeInput describes an ACKNOWLEDGEMENT envelope to build.
type AckEnvelopeInput struct {
	// MessageID is the new envelope's own message_id (the caller generates it: workflow code
	// must use a deterministic source, the frontend uses uuid.New).
	MessageID string
	// ProducerID is who sends the ACK; SchedulerID for router-originated NACKs.
	ProducerID string
	// CorrelationID is echoed from the acknowledged message (§11.3).
	CorrelationID string
	// Ack is the payload.
	Ack AckPayload
}

// NewAckEnvelope builds an ACKNOWLEDGEMENT envelope carrying the JSON ACK payload; a NACK is
// an ACK whose stage is REJECTED, FAILED or TIMED_OUT with an error_code (§21).
func NewAckEnvelope(in AckEnvelopeInput) *commonpb.Envelope {
	payload, _ := json.Marshal(in.Ack) // cannot fail: only strings
	return &commonpb.Envelope{
		MessageId:     in.MessageID,
		ProducerId:    in.ProducerID,
		CorrelationId: in.CorrelationID,
		MessageType:   commonpb.MessageType_ACKNOWLEDGEMENT,
		ContentType:   AckContentType,
		ContentLength: uint64(len(payload)),
		Payload:       payload,
	}
}

// AckEnums is how an ACK payload writes ack_stage and error_code: as enum names, as the
// RFC's example does (§13) and the server does by default, or as enum numbers, as the
// published JS and Python SDKs write them and compare them (wire contract). The server
// answers an agent in its dialect (docs/messaging.md "ACK dialects").
type AckEnums int

const (
	// AckEnumNames writes {"ack_stage":"RECEIVED","error_code":"BUFFER_FULL"}.
	AckEnumNames AckEnums = iota
	// AckEnumNumbers writes {"ack_stage":1,"error_code":1}.
	AckEnumNumbers
)

// String is the dialect's metadata value: "names" or "numbers".
func (e AckEnums) String() string {
	if e == AckEnumNumbers {
		return "numbers"
	}
	return "names"
}

// ParseAckEnums reads the value of the sw4rm-ack-enums metadata: "names" or "numbers".
func ParseAckEnums(v string) (AckEnums, *Error) {
	switch v {
	case "names":
		return AckEnumNames, nil
	case "numbers":
		return AckEnumNumbers, nil
	}
	return AckEnumNames, Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "ACK dialect %q must be \"names\" or \"numbers\"", truncate(v))
}

// AckEnumsOf reports the dialect an ACK payload is written in, judged by its ack_stage; ok
// is false when the payload does not say (it is not the ACK object, or has no ack_stage).
func AckEnumsOf(payload []byte) (AckEnums, bool) {
	var j struct {
		AckStage enumJSON `json:"ack_stage"`
	}
	if json.Unmarshal(payload, &j) != nil || j.AckStage.absent() {
		return AckEnumNames, false
	}
	if j.AckStage.isNumber {
		return AckEnumNumbers, true
	}
	return AckEnumNames, true
}

// ackNumbersJSON is the wire form with the enums as numbers; error_code is always present,
// 0 when unset, as the published SDKs write it.
type ackNumbersJSON struct {
	AckForMessageID string `json:"ack_for_message_id"`
	AckStage        int32  `json:"ack_stage"`
	ErrorCode       int32  `json:"error_code"`
	Note            string `json:"note,omitempty"`
}

// AckIn returns env written in dialect enums: for an ACKNOWLEDGEMENT envelope whose payload
// is a valid ACK in the other dialect, a copy with the payload rewritten (and its
// content_length); env itself otherwise, never modified. Rewriting is safe: envelopes are
// not signed (signatures cover calls, docs/signing.md), and the stored row keeps the
// payload as written.
func AckIn(env *commonpb.Envelope, enums AckEnums) *commonpb.Envelope {
	if env.GetMessageType() != commonpb.MessageType_ACKNOWLEDGEMENT {
		return env
	}
	if have, ok := AckEnumsOf(env.GetPayload()); !ok || have == enums {
		return env
	}
	ack, perr := ParseAck(env)
	if perr != nil {
		return env
	}
	var payload []byte
	if enums == AckEnumNumbers {
		payload, _ = json.Marshal(ackNumbersJSON{AckForMessageID: ack.AckForMessageID, AckStage: int32(ack.Stage),
			ErrorCode: int32(ack.ErrorCode), Note: ack.Note}) // cannot fail: strings and integers
	} else {
		payload, _ = json.Marshal(ack) // cannot fail: only strings
	}
	out := proto.Clone(env).(*commonpb.Envelope)
	out.Payload, out.ContentLength = payload, uint64(len(payload))
	return out
}
