package builtin

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/tools"
)

type processArgs struct {
	Argv  []string `json:"argv"`
	Stdin *string  `json:"stdin"`
}

type processResult struct {
	ExitCode    int   `json:"exit_code"`
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
	CPUMS       int64 `json:"cpu_ms"`
}

// errEmitFailed ends a process whose call can take no more frames.
var errEmitFailed = errors.New("the call takes no more frames")

// processRun checks a process.run call against its policy and runs it (runProcess, per
// platform). The policy checks come first, so that a refused call starts nothing:
//   - privilege MINIMAL forbids process spawning (§18.5.3);
//   - network_policy decides the process's network (planNetwork, netPlan): an empty
//     namespace for DENY_ALL, one whose only way out is the call's egress proxy for
//     EGRESS_RESTRICTED and EGRESS_UNRESTRICTED, the host's for FULL_ACCESS.
func (p *Provider) processRun(ctx context.Context, req tools.Request, emit tools.Emit) (tools.Result, error) {
	var a processArgs
	if err := decodeArgs(req, &a); err != nil {
		return tools.Result{}, err
	}
	if len(a.Argv) == 0 || a.Argv[0] == "" {
		return tools.Result{}, tool.Errorf(tool.CodeValidation, "tool %q: argv must name a program", req.ToolName)
	}
	for i, s := range a.Argv {
		if strings.IndexByte(s, 0) >= 0 {
			return tools.Result{}, tool.Errorf(tool.CodeValidation, "tool %q: argv[%d] contains a NUL byte", req.ToolName, i)
		}
	}
	if a.Stdin != nil && len(*a.Stdin) > p.opts.MaxFileBytes {
		return tools.Result{}, tool.Errorf(tool.CodeValidation, "tool %q: stdin is %d bytes, more than %d", req.ToolName, len(*a.Stdin), p.opts.MaxFileBytes)
	}
	// A zero Privilege is a policy nobody resolved: it is as strict as MINIMAL.
	if req.Policy.Privilege < tool.PrivilegeDefault {
		return tools.Result{}, tool.Errorf(tool.CodePermissionDenied,
			"tool %q: privilege_level MINIMAL forbids process spawning (§18.5.3); ask for privilege_level DEFAULT or higher", req.ToolName)
	}
	nw, err := p.planNetwork(req)
	if err != nil {
		return tools.Result{}, err
	}
	res, err := p.runProcess(ctx, req, a, nw, emit)
	return nw.finish(req, res, err)
}

// piece is output read from one of a process's streams.
type piece struct {
	contentType string // ContentTypeStdout or ContentTypeStderr
	data        []byte
}

// streamer turns a process's output into frames, in the order it was read: output of one
// stream is gathered into frames of at most chunk bytes (cut after the last newline, or else
// between UTF-8 characters, when a frame is full), and a switch to the other stream, a
// flush tick or the end sends what was gathered. It is used by one goroutine.
type streamer struct {
	ctx   context.Context
	emit  tools.Emit
	chunk int

	contentType string // the stream buf holds
	buf         []byte
	err         error // the first failure of emit; nothing is sent after it

	stdout, stderr int64  // bytes read
	tail           []byte // the end of stderr, at most tailMax bytes
	tailMax        int
}

// add takes output read from a stream.
func (s *streamer) add(pc piece) {
	if pc.contentType == ContentTypeStderr {
		s.stderr += int64(len(pc.data))
		s.tail = append(s.tail, pc.data...)
		if over := len(s.tail) - s.tailMax; over > 0 {
			s.tail = append(s.tail[:0], s.tail[over:]...)
		}
	} else {
		s.stdout += int64(len(pc.data))
	}
	if pc.contentType != s.contentType {
		s.flush()
		s.contentType = pc.contentType
	}
	s.buf = append(s.buf, pc.data...)
	for len(s.buf) >= s.chunk {
		n := cut(s.buf[:s.chunk])
		s.send(s.buf[:n])
		s.buf = append(s.buf[:0], s.buf[n:]...)
	}
}

// flush sends what was gathered.
func (s *streamer) flush() {
	if len(s.buf) > 0 {
		s.send(s.buf)
		s.buf = s.buf[:0]
	}
}

func (s *streamer) send(b []byte) {
	if s.err != nil {
		return
	}
	// The frame's data must not change when buf is reused.
	s.err = s.emit(s.ctx, s.contentType, bytes.Clone(b))
}

// stderrTail is the end of stderr as text for a message, starting at a character boundary.
func (s *streamer) stderrTail() string {
	t := s.tail
	for len(t) > 0 && !utf8.RuneStart(t[0]) {
		t = t[1:]
	}
	return strings.TrimSpace(strings.ToValidUTF8(string(t), "\uFFFD"))
}

// cut returns how much of a full frame to send: up to its last newline, else all of it
// except a UTF-8 character cut short at its end, else all of it.
func cut(b []byte) int {
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return i + 1
	}
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) && i > 0 {
				return i
			}
			break
		}
	}
	return len(b)
}
