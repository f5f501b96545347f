package builtin

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestCut(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int
	}{
		{"abc\ndef", 4},     // after the last newline
		{"a\nb\n", 4},       // a newline at the end
		{"abcdef", 6},       // no newline, ASCII: all
		{"ab\xc3\xa9", 4},   // "abé" complete: all
		{"ab\xc3", 2},       // é cut short: before it
		{"ab\xe2\x82", 2},   // € cut short: before it
		{"\xe2\x82", 2},     // nothing before the short character: all
		{"abc\xff", 4},      // invalid, not a character start: all
		{"\xf0\x9f\x98", 0}, // an emoji cut short at the start: all
	} {
		want := tt.want
		if want == 0 {
			want = len(tt.in)
		}
		if got := cut([]byte(tt.in)); got != want {
			t.Errorf("cut(%q) = %d, want %d", tt.in, got, want)
		}
	}
}

func TestStreamer(t *testing.T) {
	rec := &recorder{}
	s := &streamer{ctx: context.Background(), emit: rec.emit, chunk: 8, tailMax: 7}
	s.add(piece{ContentTypeStdout, []byte("ab\ncdefghij")}) // full: "ab\n" (cut at the newline), then "cdefghij"
	s.add(piece{ContentTypeStdout, []byte("k")})
	s.add(piece{ContentTypeStderr, []byte("é-error")}) // the switch sends stdout's "k" first
	s.flush()
	s.flush() // nothing gathered: no frame
	var got []string
	for _, f := range rec.all() {
		got = append(got, strings.TrimPrefix(f.contentType, "text/plain; stream=")+":"+f.data)
	}
	want := []string{"stdout:ab\n", "stdout:cdefghij", "stdout:k", "stderr:é-error"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("frames = %q, want %q", got, want)
	}
	if s.stdout != 12 || s.stderr != 8 {
		t.Errorf("counted %d and %d bytes", s.stdout, s.stderr)
	}
	if tail := s.stderrTail(); tail != "-error" {
		t.Errorf("stderr tail = %q", tail)
	}

	// After emit fails, nothing more is sent, but output is still counted.
	rec = &recorder{fail: errors.New("gone")}
	s = &streamer{ctx: context.Background(), emit: rec.emit, chunk: 4, tailMax: 8}
	s.add(piece{ContentTypeStdout, []byte("12345678")})
	s.add(piece{ContentTypeStderr, []byte("x")})
	s.flush()
	if len(rec.all()) != 1 || s.err == nil || s.stdout != 8 || s.stderr != 1 {
		t.Errorf("after a failed emit: %d frames, err %v, counts %d %d", len(rec.all()), s.err, s.stdout, s.stderr)
	}
}
