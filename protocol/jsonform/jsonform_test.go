package jsonform

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// TestBytes: the new forms read back as the same bytes, and the old form (base64) decodes.
func TestBytes(t *testing.T) {
	for _, c := range []struct {
		name string
		in   []byte
		want string
	}{
		{"compact object", []byte(`{"a":1}`), `{"a":1}`},
		{"array", []byte(`[1,2]`), `[1,2]`},
		{"pretty object", []byte("{ \"a\": 1 }"), `"{ \"a\": 1 }"`},
		{"text", []byte("hello"), `"aGVsbG8="`},
		{"json string", []byte(`"x"`), `"Ingi"`},
		{"invalid json", []byte(`{"a":`), `"eyJhIjo="`},
		{"nil", nil, `null`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := json.Marshal(Bytes(c.in))
			if err != nil || string(got) != c.want {
				t.Fatalf("Marshal = %s, %v; want %s", got, err, c.want)
			}
			var back Bytes
			if err := json.Unmarshal(got, &back); err != nil || !bytes.Equal(back, c.in) {
				t.Fatalf("Unmarshal(%s) = %q, %v; want %q", got, back, err, c.in)
			}
			// encoding/json's own form of []byte, which recorded histories hold.
			old, _ := json.Marshal(c.in)
			var fromOld Bytes
			if err := json.Unmarshal(old, &fromOld); err != nil || !bytes.Equal(fromOld, c.in) {
				t.Fatalf("Unmarshal(old %s) = %q, %v; want %q", old, fromOld, err, c.in)
			}
		})
	}
}

// TestDuration: text out, text or nanoseconds in.
func TestDuration(t *testing.T) {
	got, err := json.Marshal(Duration(5 * time.Minute))
	if err != nil || string(got) != `"5m0s"` {
		t.Fatalf("Marshal = %s, %v", got, err)
	}
	for _, in := range []string{`"5m0s"`, `"300s"`, `300000000000`} {
		var d Duration
		if err := json.Unmarshal([]byte(in), &d); err != nil || time.Duration(d) != 5*time.Minute {
			t.Fatalf("Unmarshal(%s) = %v, %v", in, time.Duration(d), err)
		}
	}
	var d Duration
	if err := json.Unmarshal([]byte(`"soon"`), &d); err == nil {
		t.Fatal("Unmarshal of a bad duration: no error")
	}
}

// TestEnum: a name or a number in.
func TestEnum(t *testing.T) {
	values := map[string]int32{"PENDING": 1, "FAILED": 4}
	for in, want := range map[string]int32{`"FAILED"`: 4, `4`: 4, `null`: 0} {
		got, err := UnmarshalEnum([]byte(in), values)
		if err != nil || got != want {
			t.Fatalf("UnmarshalEnum(%s) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := UnmarshalEnum([]byte(`"NOPE"`), values); err == nil {
		t.Fatal("an unknown name: no error")
	}
}

// TestJSONText: compact JSON objects and arrays are inlined, anything else stays a string;
// both read back as the same text, and the old form (a string) decodes.
func TestJSONText(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":1}`:    `{"a":1}`,
		`[1]`:        `[1]`,
		`{ "a": 1 }`: `"{ \"a\": 1 }"`,
		`plain`:      `"plain"`,
		`"quoted"`:   `"\"quoted\""`,
		``:           `""`,
	} {
		got, err := json.Marshal(JSONText(in))
		if err != nil || string(got) != want {
			t.Fatalf("Marshal(%q) = %s, %v; want %s", in, got, err, want)
		}
		old, _ := json.Marshal(in)
		for _, enc := range [][]byte{got, old} {
			var back JSONText
			if err := json.Unmarshal(enc, &back); err != nil || string(back) != in {
				t.Fatalf("Unmarshal(%s) = %q, %v; want %q", enc, back, err, in)
			}
		}
	}
}
