package dag

import (
	"strings"
	"testing"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
)

func TestEventOf(t *testing.T) {
	long := strings.Repeat("x", MaxEventName)
	tests := []struct {
		name                 string
		corr, ctype, payload string
		want                 MessageEvent
		isEvent              bool
		refused              string // part of the refusal's message; "" for none
	}{
		{name: "event", corr: "dag/release", ctype: "application/json", payload: `{"event":"approved"}`,
			want: MessageEvent{WorkflowID: "release", Name: "approved"}, isEvent: true},
		{name: "other members ignored", corr: "dag/release", ctype: "application/json; charset=utf-8", payload: ` {"by":"ops","event":"approved","note":{"x":1}} `,
			want: MessageEvent{WorkflowID: "release", Name: "approved"}, isEvent: true},
		{name: "media type case", corr: "dag/r", ctype: "Application/JSON", payload: `{"event":"go"}`,
			want: MessageEvent{WorkflowID: "r", Name: "go"}, isEvent: true},
		{name: "longest name", corr: "dag/r", ctype: "application/json", payload: `{"event":"` + long + `"}`,
			want: MessageEvent{WorkflowID: "r", Name: long}, isEvent: true},

		{name: "another correlation", corr: "release", ctype: "application/json", payload: `{"event":"approved"}`},
		{name: "prefix elsewhere", corr: "x-dag/release", ctype: "application/json", payload: `{"event":"approved"}`},
		{name: "another content type", corr: "dag/release", ctype: "text/plain", payload: `{"event":"approved"}`},
		{name: "no content type", corr: "dag/release", payload: `{"event":"approved"}`},
		{name: "no event member", corr: "dag/release", ctype: "application/json", payload: `{"status":"done"}`},
		{name: "an array", corr: "dag/release", ctype: "application/json", payload: `[{"event":"approved"}]`},
		{name: "a string", corr: "dag/release", ctype: "application/json", payload: `"approved"`},

		{name: "not JSON", corr: "dag/release", ctype: "application/json", payload: `{"event":approved}`, refused: "not JSON"},
		{name: "empty payload", corr: "dag/release", ctype: "application/json", payload: ``, refused: "not JSON"},
		{name: "name not a string", corr: "dag/release", ctype: "application/json", payload: `{"event":42}`, refused: "a string of 1 to 256 bytes, not 42"},
		{name: "empty name", corr: "dag/release", ctype: "application/json", payload: `{"event":""}`, refused: "must be the event's name"},
		{name: "name too long", corr: "dag/r", ctype: "application/json", payload: `{"event":"` + long + `x"}`, refused: "must be the event's name"},
		{name: "no workflow id", corr: "dag/", ctype: "application/json", payload: `{"event":"approved"}`, refused: "names no DAG run"},
		{name: "bad workflow id", corr: "dag/a b", ctype: "application/json", payload: `{"event":"approved"}`, refused: "names no DAG run"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, perr := EventOf(tt.corr, tt.ctype, []byte(tt.payload))
			if tt.refused != "" {
				if perr == nil {
					t.Fatalf("EventOf accepted it: %+v, %v", got, ok)
				}
				if perr.Code != commonpb.ErrorCode_VALIDATION_ERROR || !strings.Contains(perr.Msg, tt.refused) {
					t.Fatalf("refusal %v %q, want VALIDATION_ERROR containing %q", perr.Code, perr.Msg, tt.refused)
				}
				if ok {
					t.Fatal("a refusal is no event")
				}
				return
			}
			if perr != nil {
				t.Fatalf("refused: %v", perr)
			}
			if ok != tt.isEvent || got != tt.want {
				t.Fatalf("EventOf = %+v, %v; want %+v, %v", got, ok, tt.want, tt.isEvent)
			}
		})
	}
}

func TestRunOfCorrelation(t *testing.T) {
	if id, ok := RunOfCorrelation("dag/release"); !ok || id != "release" {
		t.Errorf("dag/release: %q %v", id, ok)
	}
	if _, ok := RunOfCorrelation("task/release"); ok {
		t.Error("task/release is no run's correlation")
	}
}
