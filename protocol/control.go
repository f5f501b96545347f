package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
)

// The scheduler's CONTROL conversation with an agent (§7, App. D C.4, C.5). The RFC names
// the messages (CONTROL RUN, PREEMPT_REQUEST, TERMINATE{grace_ms}, KILL) but not their
// payload; here each is a CONTROL envelope whose JSON payload is a Control with its "type".
// The scheduler's messages are tracked like any other: the agent acknowledges them with
// ordinary ACK envelopes (RECEIVED on delivery, FULFILLED when done), and the router hands
// those ACKs to the scheduler. An agent addresses the scheduler (recipient SchedulerID) to
// declare a non-preemptible section (§7.2).
const (
	// ControlRun starts (or, with Resume, resumes) a task. The agent ACKs it FULFILLED with
	// the result as note when the task completes, FAILED with an error_code when it fails.
	ControlRun = "RUN"
	// ControlPreemptRequest asks the agent to yield the task at its next safe point (§7.2);
	// the agent ACKs it FULFILLED once it has yielded.
	ControlPreemptRequest = "PREEMPT_REQUEST"
	// ControlTerminate is the soft termination of forced preemption: stop the task within
	// GraceMS (§7.2, C.5); the agent ACKs it FULFILLED once terminated.
	ControlTerminate = "TERMINATE"
	// ControlKill is the hard termination that follows an unanswered TERMINATE (§7.2).
	ControlKill = "KILL"
	// ControlShutdown tells the agent to shut down within GraceMS (§8.4).
	ControlShutdown = "SHUTDOWN"
	// ControlNonPreemptibleBegin, sent by an agent to the scheduler, opens a non-preemptible
	// section of at most MaxDurationMS (mandatory, §7.2).
	ControlNonPreemptibleBegin = "NON_PREEMPTIBLE_BEGIN"
	// ControlNonPreemptibleEnd, sent by an agent to the scheduler, closes the section.
	ControlNonPreemptibleEnd = "NON_PREEMPTIBLE_END"
)

// MaxNonPreemptible bounds the max_duration an agent may declare for a non-preemptible
// section: the RFC asks for sections used "sparingly" for transactions and atomic file
// operations (§7.2), and an unbounded deferral would defeat preemption.
const MaxNonPreemptible = time.Hour

// TaskCorrelationID is the correlation_id of every envelope about a task: "task/<task_id>".
func TaskCorrelationID(taskID string) string { return "task/" + taskID }

// Control is the JSON payload of a CONTROL envelope between the scheduler and an agent.
type Control struct {
	// Type is one of the Control* constants.
	Type string `json:"type"`
	// TaskID names the task (every type but SHUTDOWN).
	TaskID string `json:"task_id,omitempty"`
	// Priority is the task's priority, -19 (highest) .. 20 (RUN).
	Priority int32 `json:"priority,omitempty"`
	// Params are the task's parameters as submitted (RUN; base64 in JSON).
	Params []byte `json:"params,omitempty"`
	// ParamsContentType is the MIME type of Params (RUN).
	ParamsContentType string `json:"params_content_type,omitempty"`
	// Scope is the task's scope metadata (RUN, §9.2).
	Scope string `json:"scope,omitempty"`
	// Resume marks a RUN that resumes a task the agent yielded earlier (§7.2).
	Resume bool `json:"resume,omitempty"`
	// Reason explains a PREEMPT_REQUEST, TERMINATE, KILL or SHUTDOWN.
	Reason string `json:"reason,omitempty"`
	// GraceMS is the grace period of TERMINATE and SHUTDOWN.
	GraceMS int64 `json:"grace_ms,omitempty"`
	// MaxDurationMS is the declared bound of a non-preemptible section (BEGIN).
	MaxDurationMS int64 `json:"max_duration_ms,omitempty"`
}

// MaxDuration returns MaxDurationMS as a duration.
func (c Control) MaxDuration() time.Duration {
	return time.Duration(c.MaxDurationMS) * time.Millisecond
}

// Grace returns GraceMS as a duration.
func (c Control) Grace() time.Duration { return time.Duration(c.GraceMS) * time.Millisecond }

// Validate checks a control payload: a known type, a task_id where one is needed, and the
// mandatory positive, bounded max_duration of a non-preemptible section (§7.2).
func (c Control) Validate() *Error {
	switch c.Type {
	case ControlRun, ControlPreemptRequest, ControlTerminate, ControlKill, ControlNonPreemptibleBegin, ControlNonPreemptibleEnd:
		if c.TaskID == "" {
			return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "CONTROL %s needs a task_id", c.Type)
		}
	case ControlShutdown:
	case "":
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "CONTROL payload needs a \"type\"")
	default:
		return Errorf(commonpb.ErrorCode_UNSUPPORTED_MESSAGE_TYPE, "unknown CONTROL type %q", c.Type)
	}
	if c.Type == ControlRun && (c.Priority < MinPriority || c.Priority > MaxPriority) {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "priority %d is outside %d..%d (§7.1)", c.Priority, MinPriority, MaxPriority)
	}
	if c.Type == ControlNonPreemptibleBegin {
		switch d := c.MaxDuration(); {
		case d <= 0:
			return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "a non-preemptible section must declare a positive max_duration_ms (§7.2), got %d", c.MaxDurationMS)
		case d > MaxNonPreemptible:
			return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "max_duration_ms %d exceeds the %s bound on non-preemptible sections", c.MaxDurationMS, MaxNonPreemptible)
		}
	}
	if c.GraceMS < 0 {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "grace_ms must not be negative, got %d", c.GraceMS)
	}
	return nil
}

// Task priorities (§7.1): -19 is the highest, 20 the lowest, 0 the default.
const (
	MinPriority int32 = -19
	MaxPriority int32 = 20
)

// ParseControl decodes and validates the payload of a CONTROL envelope. Unknown fields are
// refused so that a misspelt field is reported rather than ignored.
func ParseControl(env *commonpb.Envelope) (Control, *Error) {
	if env.GetMessageType() != commonpb.MessageType_CONTROL {
		return Control{}, Errorf(commonpb.ErrorCode_UNSUPPORTED_MESSAGE_TYPE, "expected a CONTROL envelope, got %s", env.GetMessageType())
	}
	dec := json.NewDecoder(bytes.NewReader(env.GetPayload()))
	dec.DisallowUnknownFields()
	var c Control
	if err := dec.Decode(&c); err != nil {
		return Control{}, Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "CONTROL payload is not a valid control object: %v", err)
	}
	if dec.More() {
		return Control{}, Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "CONTROL payload has trailing data after the control object")
	}
	return c, c.Validate()
}

// NewControlEnvelope builds a CONTROL envelope carrying c. The caller sets message_id and
// producer_id (workflow code must pass a deterministic message_id).
func NewControlEnvelope(messageID, producerID string, c Control) (*commonpb.Envelope, error) {
	payload, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode CONTROL %s: %w", c.Type, err)
	}
	corr := "scheduler"
	if c.TaskID != "" {
		corr = TaskCorrelationID(c.TaskID)
	}
	return &commonpb.Envelope{
		MessageId: messageID, ProducerId: producerID, CorrelationId: corr,
		MessageType: commonpb.MessageType_CONTROL, ContentType: "application/json",
		ContentLength: uint64(len(payload)), Payload: payload,
	}, nil
}
