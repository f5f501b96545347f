package workflows

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/jsonform"
)

// The JSON of the task payloads is what the Temporal UI shows of a task's input, events and
// result: parameters as JSON, durations as text, error codes by name. Each decoder also reads
// the form encoding/json gave the same fields before (base64, nanoseconds, numbers), which
// recorded histories and runs in flight hold. In each method an outer field hides the
// embedded field of the same name: encoding/json takes the shallower one.

// errorCodeJSON is an error code's name, empty for none (so omitempty drops it).
func errorCodeJSON(c commonpb.ErrorCode) string {
	if c == commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED {
		return ""
	}
	return c.String()
}

// errorCodeOf decodes an error code given by name or by number; absent is none.
func errorCodeOf(raw json.RawMessage) (commonpb.ErrorCode, error) {
	if raw == nil || string(raw) == `""` {
		return commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED, nil
	}
	n, err := jsonform.UnmarshalEnum(raw, commonpb.ErrorCode_value)
	if err != nil {
		return 0, fmt.Errorf("error code: %w", err)
	}
	return commonpb.ErrorCode(n), nil
}

// MarshalJSON writes the parameters as JSON and the durations as text.
func (in TaskInput) MarshalJSON() ([]byte, error) {
	type plain TaskInput
	return json.Marshal(struct {
		plain
		WaitRecheck jsonform.Duration `json:",omitempty"`
		HITLTimeout jsonform.Duration `json:",omitempty"`
	}{plain(in), jsonform.Duration(in.WaitRecheck), jsonform.Duration(in.HITLTimeout)})
}

// UnmarshalJSON reads both forms of the durations (text or nanoseconds).
func (in *TaskInput) UnmarshalJSON(data []byte) error {
	type plain TaskInput
	v := struct {
		*plain
		WaitRecheck jsonform.Duration
		HITLTimeout jsonform.Duration
	}{plain: (*plain)(in)}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	in.WaitRecheck, in.HITLTimeout = time.Duration(v.WaitRecheck), time.Duration(v.HITLTimeout)
	return nil
}

// MarshalJSON writes ErrorCode by name and a JSON Result as JSON.
func (s TaskStatus) MarshalJSON() ([]byte, error) {
	type plain TaskStatus
	return json.Marshal(struct {
		plain
		ErrorCode string            `json:",omitempty"`
		Result    jsonform.JSONText `json:",omitempty"`
	}{plain(s), errorCodeJSON(s.ErrorCode), jsonform.JSONText(s.Result)})
}

// UnmarshalJSON reads ErrorCode by name or by number, and Result as JSON or a string.
func (s *TaskStatus) UnmarshalJSON(data []byte) error {
	type plain TaskStatus
	v := struct {
		*plain
		ErrorCode json.RawMessage
		Result    jsonform.JSONText
	}{plain: (*plain)(s)}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	s.Result = string(v.Result)
	c, err := errorCodeOf(v.ErrorCode)
	s.ErrorCode = c
	return err
}

// MarshalJSON writes ErrorCode by name and a JSON Result as JSON.
func (e TaskEvent) MarshalJSON() ([]byte, error) {
	type plain TaskEvent
	return json.Marshal(struct {
		plain
		ErrorCode string            `json:",omitempty"`
		Result    jsonform.JSONText `json:",omitempty"`
	}{plain(e), errorCodeJSON(e.ErrorCode), jsonform.JSONText(e.Result)})
}

// UnmarshalJSON reads ErrorCode by name or by number, and Result as JSON or a string.
func (e *TaskEvent) UnmarshalJSON(data []byte) error {
	type plain TaskEvent
	v := struct {
		*plain
		ErrorCode json.RawMessage
		Result    jsonform.JSONText
	}{plain: (*plain)(e)}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	e.Result = string(v.Result)
	c, err := errorCodeOf(v.ErrorCode)
	e.ErrorCode = c
	return err
}
