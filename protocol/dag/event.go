package dag

import (
	"bytes"
	"encoding/json"
	"mime"
	"strings"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// Events by message (§17.7 "Trigger Types": EVENT, "triggered by external events or
// messages"). A run's correlation id is its workflow ID, RunCorrelationPrefix + workflow_id;
// a message admitted on it whose content type is application/json and whose payload is a
// JSON object with a string member "event" delivers that event to the run: every PENDING
// EVENT node whose metadata "event" equals the name is released. The rest of the payload is
// not read by the run (the message still reaches its recipient whole).

const (
	// RunCorrelationPrefix starts the correlation id of every DAG run: "dag/<workflow_id>",
	// which is also the run's workflow ID and the correlation of its audit rows.
	RunCorrelationPrefix = "dag/"
	// MetaEvent is the node metadata key naming the event an EVENT node waits for, and the
	// payload member of a message that delivers an event.
	MetaEvent = "event"
	// MaxEventName bounds an event name carried by a message, in bytes.
	MaxEventName = 256
)

// MessageEvent is the event a message delivers to a run.
type MessageEvent struct {
	// WorkflowID names the run: the correlation id without RunCorrelationPrefix.
	WorkflowID string
	// Name is the event: the payload's member "event".
	Name string
}

// RunOfCorrelation returns the workflow_id of the DAG run whose correlation id is
// correlationID, and false for any other correlation.
func RunOfCorrelation(correlationID string) (string, bool) {
	id, ok := strings.CutPrefix(correlationID, RunCorrelationPrefix)
	return id, ok
}

// EventOf reads the event a message carries. It returns false, and no error, for a message
// that carries none: another correlation than a run's, another content type than
// application/json (parameters allowed), or a payload that is a JSON array, string, number
// or an object without a member "event". On a run's correlation a message that looks meant
// as an event but cannot be one is refused with validation_error, so an event is never lost
// to a typo: a JSON payload that does not parse, an "event" that is not a string of 1 to
// MaxEventName bytes, or a correlation whose workflow_id is not a valid workflow id.
func EventOf(correlationID, contentType string, payload []byte) (MessageEvent, bool, *protocol.Error) {
	id, ok := RunOfCorrelation(correlationID)
	if !ok {
		return MessageEvent{}, false, nil
	}
	if mt, _, err := mime.ParseMediaType(contentType); err != nil || mt != "application/json" {
		return MessageEvent{}, false, nil
	}
	p := bytes.TrimSpace(payload)
	if !json.Valid(p) {
		return MessageEvent{}, false, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR,
			"the payload of a message on DAG run correlation %q is declared application/json but is not JSON; an event is {\"event\": \"<name>\"} (§17.7)", short(correlationID))
	}
	if len(p) == 0 || p[0] != '{' {
		return MessageEvent{}, false, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(p, &obj); err != nil {
		return MessageEvent{}, false, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "the payload of a message on DAG run correlation %q: %v", short(correlationID), err)
	}
	raw, ok := obj[MetaEvent]
	if !ok {
		return MessageEvent{}, false, nil
	}
	var name string
	if err := json.Unmarshal(raw, &name); err != nil || name == "" || len(name) > MaxEventName {
		return MessageEvent{}, false, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR,
			"payload member %q on DAG run correlation %q must be the event's name, a string of 1 to %d bytes, not %s (§17.7)", MetaEvent, short(correlationID), MaxEventName, short(string(raw)))
	}
	if !validID(id) {
		return MessageEvent{}, false, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR,
			"event %q: correlation %q names no DAG run: %q is not a workflow id (1-%d characters of letters, digits and . _ : @ -)", short(name), short(correlationID), short(id), maxID)
	}
	return MessageEvent{WorkflowID: id, Name: name}, true, nil
}
