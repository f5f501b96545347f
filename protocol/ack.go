package protocol

import (
	"encoding/json"
	"mime"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
)

// AckContentType is the content type of ACKNOWLEDGEMENT envelopes (wire contract).
const AckContentType = "application/json"

// AckPayload is the JSON payload of an ACKNOWLEDGEMENT envelope as the published SDKs send it:
// {"ack_for_message_id","ack_stage","error_code","note"}, with the stage and the code spelled
// as their enum names. Parsing also accepts the RFC's lower-case spelling ("buffer_full", C.3).
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

type ackJSON struct {
	AckForMessageID string `json:"ack_for_message_id"`
	AckStage        string `json:"ack_stage"`
	ErrorCode       string `json:"error_code,omitempty"`
	Note            string `json:"note,omitempty"`
}

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
	var j ackJSON
	if err := json.Unmarshal(env.GetPayload(), &j); err != nil {
		return AckPayload{}, Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "ACKNOWLEDGEMENT payload is not the ACK JSON object: %v", err)
	}
	if j.AckForMessageID == "" {
		return AckPayload{}, Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "ACKNOWLEDGEMENT payload needs ack_for_message_id")
	}
	stage, ok := commonpb.AckStage_value[asciiUpper(j.AckStage)]
	if !ok || stage == 0 {
		return AckPayload{}, Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "ack_stage %q is not one of RECEIVED, READ, FULFILLED, REJECTED, FAILED, TIMED_OUT", truncate(j.AckStage))
	}
	var code int32
	if j.ErrorCode != "" {
		c, ok := commonpb.ErrorCode_value[asciiUpper(j.ErrorCode)]
		if !ok {
			return AckPayload{}, Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "error_code %q is not a SW4RM error code", truncate(j.ErrorCode))
		}
		code = c
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
