// Package jsonform holds the readable JSON forms of values that workflows carry in their
// inputs, results and signals, so the Temporal UI shows a run as the protocol reads: JSON
// bytes as JSON, durations as text ("5m0s"), enums by name. Each decoder also reads the form
// encoding/json gave these values before (base64 for bytes, nanoseconds for durations,
// numbers for enums), because recorded histories and runs in flight hold that form and must
// still decode and replay.
package jsonform

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Bytes are bytes that usually hold JSON. They encode as the JSON itself when they are a
// compact JSON object or array (so decoding gives back the same bytes), as a JSON string of
// their text when they are other JSON that starts with '{' or '[' (pretty-printed, say), and
// as base64 otherwise — encoding/json's form of []byte, which the decoder also reads.
type Bytes []byte

// MarshalJSON implements json.Marshaler.
func (b Bytes) MarshalJSON() ([]byte, error) {
	if b == nil {
		return []byte("null"), nil
	}
	if jsonText(b) {
		var c bytes.Buffer
		if json.Compact(&c, b) == nil && bytes.Equal(c.Bytes(), b) {
			return append([]byte(nil), b...), nil
		}
		return json.Marshal(string(b))
	}
	return json.Marshal([]byte(b))
}

// UnmarshalJSON implements json.Unmarshaler: a JSON object or array is taken as is, a string
// that starts with '{' or '[' as text, any other string as base64 (which never starts so).
func (b *Bytes) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	switch {
	case bytes.Equal(data, []byte("null")):
		*b = nil
	case len(data) > 0 && (data[0] == '{' || data[0] == '['):
		*b = append(Bytes(nil), data...)
	default:
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return fmt.Errorf("jsonform: bytes: %w", err)
		}
		if jsonText([]byte(s)) {
			*b = Bytes(s)
			return nil
		}
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return fmt.Errorf("jsonform: bytes: %w", err)
		}
		*b = raw
	}
	return nil
}

// jsonText reports whether b is valid JSON whose first non-space byte opens an object or an
// array: the only JSON text a base64 string can never be mistaken for.
func jsonText(b []byte) bool {
	t := bytes.TrimLeft(b, " \t\r\n")
	return len(t) > 0 && (t[0] == '{' || t[0] == '[') && json.Valid(b)
}

// Duration is a time.Duration that encodes as its text ("300s" reads as "5m0s") and decodes
// text or a number of nanoseconds (encoding/json's form of time.Duration).
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return fmt.Errorf("jsonform: duration: %w", err)
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("jsonform: duration: %w", err)
		}
		*d = Duration(v)
		return nil
	}
	if bytes.Equal(data, []byte("null")) {
		return nil
	}
	n, err := strconv.ParseInt(string(data), 10, 64)
	if err != nil {
		return fmt.Errorf("jsonform: duration %s: %w", data, err)
	}
	*d = Duration(n)
	return nil
}

// MarshalEnum encodes an enum value by its name.
func MarshalEnum(name string) ([]byte, error) { return json.Marshal(name) }

// UnmarshalEnum decodes an enum value given by name (looked up in values) or by number.
func UnmarshalEnum(data []byte, values map[string]int32) (int32, error) {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return 0, fmt.Errorf("jsonform: enum: %w", err)
		}
		v, ok := values[s]
		if !ok {
			return 0, fmt.Errorf("jsonform: unknown enum name %q", s)
		}
		return v, nil
	}
	if bytes.Equal(data, []byte("null")) {
		return 0, nil
	}
	n, err := strconv.ParseInt(string(data), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("jsonform: enum %s: %w", data, err)
	}
	return int32(n), nil
}

// JSONText is a string that usually holds JSON text (a DAG run's workflow_data, a task's
// result). It encodes as the JSON itself when it is a compact JSON object or array (so
// decoding gives back the same text), else as a JSON string; it decodes either.
type JSONText string

// MarshalJSON implements json.Marshaler.
func (t JSONText) MarshalJSON() ([]byte, error) {
	if b := []byte(t); jsonText(b) {
		var c bytes.Buffer
		if json.Compact(&c, b) == nil && bytes.Equal(c.Bytes(), b) {
			return b, nil
		}
	}
	return json.Marshal(string(t))
}

// UnmarshalJSON implements json.Unmarshaler: an object or array is taken as its text, a
// string as itself.
func (t *JSONText) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && (data[0] == '{' || data[0] == '[') {
		*t = JSONText(data)
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("jsonform: JSON text: %w", err)
	}
	*t = JSONText(s)
	return nil
}
