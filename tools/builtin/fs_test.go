package builtin

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
)

// worktree makes a worktree with a file, a directory and, beside it, a file outside.
func worktree(t *testing.T) (wt, outside string) {
	t.Helper()
	base := t.TempDir()
	wt = filepath.Join(base, "wt")
	outside = filepath.Join(base, "secret.txt")
	for path, content := range map[string]string{
		filepath.Join(wt, "hello.txt"):       "hello, world\n",
		filepath.Join(wt, "sub", "deep.txt"): "deep",
		outside:                              "do not read",
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return wt, outside
}

func call(t *testing.T, p *Provider, name, wt string, args any) (map[string]any, error) {
	t.Helper()
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Call(context.Background(), request(name, wt, string(b)), nil)
	if err != nil {
		return nil, err
	}
	checkOutput(t, p, name, res)
	return decode[map[string]any](t, res), nil
}

func TestFSRead(t *testing.T) {
	p := New(Options{})
	wt, _ := worktree(t)
	got, err := call(t, p, ToolFSRead, wt, map[string]any{"path": "hello.txt"})
	if err != nil {
		t.Fatal(err)
	}
	if got["content"] != "hello, world\n" || got["encoding"] != "utf-8" || got["size"] != 13.0 || got["path"] != "hello.txt" {
		t.Errorf("fs.read = %v", got)
	}
	// An absolute path inside the worktree is the same file.
	got, err = call(t, p, ToolFSRead, wt, map[string]any{"path": filepath.Join(wt, "sub/deep.txt")})
	if err != nil || got["content"] != "deep" {
		t.Errorf("absolute path inside: %v, %v", got, err)
	}

	// Bytes that are not UTF-8 come back as base64, unchanged.
	raw := []byte{0xff, 0xfe, 'a', 0}
	if err := os.WriteFile(filepath.Join(wt, "bin"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err = call(t, p, ToolFSRead, wt, map[string]any{"path": "bin"})
	if err != nil {
		t.Fatal(err)
	}
	if got["encoding"] != "base64" || got["content"] != base64.StdEncoding.EncodeToString(raw) || got["size"] != 4.0 {
		t.Errorf("binary fs.read = %v", got)
	}

	_, err = call(t, p, ToolFSRead, wt, map[string]any{"path": "missing.txt"})
	wantCode(t, err, tool.CodeToolFailed, "no such file")
	_, err = call(t, p, ToolFSRead, wt, map[string]any{"path": "sub"})
	wantCode(t, err, tool.CodeValidation, "is a directory")

	small := New(Options{MaxFileBytes: 5})
	_, err = call(t, small, ToolFSRead, wt, map[string]any{"path": "hello.txt"})
	wantCode(t, err, tool.CodeValidation, "13 bytes, more than the 5")
}

func TestFSWrite(t *testing.T) {
	p := New(Options{})
	wt, _ := worktree(t)
	args := map[string]any{"path": "new/dir/file.txt", "content": "one\n", "create_dirs": true}
	for range 2 {
		// Idempotent: the second write leaves the same state and answers the same.
		got, err := call(t, p, ToolFSWrite, wt, args)
		if err != nil {
			t.Fatal(err)
		}
		if got["path"] != "new/dir/file.txt" || got["size"] != 4.0 {
			t.Errorf("fs.write = %v", got)
		}
	}
	if b, err := os.ReadFile(filepath.Join(wt, "new/dir/file.txt")); err != nil || string(b) != "one\n" {
		t.Errorf("file = %q, %v", b, err)
	}

	// Replacing truncates.
	if _, err := call(t, p, ToolFSWrite, wt, map[string]any{"path": "hello.txt", "content": "hi"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(wt, "hello.txt")); string(b) != "hi" {
		t.Errorf("replaced file = %q", b)
	}

	raw := []byte{0, 1, 0xff}
	if _, err := call(t, p, ToolFSWrite, wt, map[string]any{"path": "bin", "content": base64.StdEncoding.EncodeToString(raw), "encoding": "base64"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(wt, "bin")); string(b) != string(raw) {
		t.Errorf("base64 write = %v", b)
	}

	_, err := call(t, p, ToolFSWrite, wt, map[string]any{"path": "x/y.txt", "content": "no dirs"})
	wantCode(t, err, tool.CodeToolFailed, "no such file")
	_, err = call(t, p, ToolFSWrite, wt, map[string]any{"path": "b", "content": "!!", "encoding": "base64"})
	wantCode(t, err, tool.CodeValidation, "not base64")
	_, err = call(t, p, ToolFSWrite, wt, map[string]any{"path": "b", "content": "x", "encoding": "latin1"})
	wantCode(t, err, tool.CodeValidation, "encoding")
	_, err = call(t, New(Options{MaxFileBytes: 2}), ToolFSWrite, wt, map[string]any{"path": "b", "content": "xyz"})
	wantCode(t, err, tool.CodeValidation, "3 bytes")

	// confine refuses writes into .git.
	if err := os.Mkdir(filepath.Join(wt, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = call(t, p, ToolFSWrite, wt, map[string]any{"path": ".git/config", "content": "x"})
	wantCode(t, err, tool.CodePermissionDenied, ".git")
}

func TestFSList(t *testing.T) {
	p := New(Options{})
	wt, _ := worktree(t)
	if err := os.Symlink("hello.txt", filepath.Join(wt, "link")); err != nil {
		t.Fatal(err)
	}
	got, err := call(t, p, ToolFSList, wt, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, e := range got["entries"].([]any) {
		m := e.(map[string]any)
		lines = append(lines, m["name"].(string)+":"+m["type"].(string))
		if m["name"] == "hello.txt" && m["size"] != 13.0 {
			t.Errorf("hello.txt size = %v", m["size"])
		}
	}
	if s := strings.Join(lines, " "); s != "hello.txt:file link:symlink sub:dir" {
		t.Errorf("fs.list = %s", s)
	}
	if _, ok := got["truncated"]; ok {
		t.Error("an untruncated listing says truncated")
	}

	got, err = call(t, p, ToolFSList, wt, map[string]any{"path": "sub"})
	if err != nil || len(got["entries"].([]any)) != 1 {
		t.Errorf("fs.list sub = %v, %v", got, err)
	}

	got, err = call(t, New(Options{MaxListEntries: 2}), ToolFSList, wt, map[string]any{})
	if err != nil || len(got["entries"].([]any)) != 2 || got["truncated"] != true {
		t.Errorf("truncated fs.list = %v, %v", got, err)
	}

	_, err = call(t, p, ToolFSList, wt, map[string]any{"path": "hello.txt"})
	wantCode(t, err, tool.CodeToolFailed, "")
}

// TestFSEscapesRefused: no fs tool reaches outside the worktree — by "..", by an absolute
// path, or through a symbolic link — and each refusal names confine's reason and is audited.
func TestFSEscapesRefused(t *testing.T) {
	var mu sync.Mutex
	var audited []string
	p := New(Options{Audit: func(op, path string, _ error) {
		mu.Lock()
		defer mu.Unlock()
		audited = append(audited, op+" "+path)
	}})
	wt, outside := worktree(t)
	if err := os.Symlink(outside, filepath.Join(wt, "abs-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../secret.txt", filepath.Join(wt, "rel-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..", filepath.Join(wt, "up")); err != nil {
		t.Fatal(err)
	}
	escapes := []struct{ path, why string }{
		{"../secret.txt", "leaves the worktree"},
		{"sub/../../secret.txt", "leaves the worktree"},
		{outside, "absolute path is outside the worktree"},
		{"/etc/passwd", "absolute path is outside the worktree"},
		{"abs-link", "absolute target"},
		{"rel-link", "symbolic link"},
		{"up/secret.txt", "symbolic link"},
	}
	for _, e := range escapes {
		_, err := call(t, p, ToolFSRead, wt, map[string]any{"path": e.path})
		wantCode(t, err, tool.CodePermissionDenied, e.why)
		_, err = call(t, p, ToolFSWrite, wt, map[string]any{"path": e.path, "content": "pwned"})
		wantCode(t, err, tool.CodePermissionDenied, e.why)
		_, err = call(t, p, ToolFSWrite, wt, map[string]any{"path": e.path + "/new/f", "content": "pwned", "create_dirs": true})
		if tool.CodeOf(err) != tool.CodePermissionDenied {
			t.Errorf("fs.write with create_dirs under %q: %v", e.path, err)
		}
	}
	for _, dir := range []string{"..", "up", filepath.Dir(wt), "/"} {
		_, err := call(t, p, ToolFSList, wt, map[string]any{"path": dir})
		wantCode(t, err, tool.CodePermissionDenied, "")
	}
	if b, _ := os.ReadFile(outside); string(b) != "do not read" {
		t.Errorf("the file outside was changed: %q", b)
	}
	if entries, _ := os.ReadDir(filepath.Dir(wt)); len(entries) != 2 {
		t.Errorf("something was created beside the worktree: %v", entries)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(audited) < len(escapes)*2 {
		t.Errorf("audited %d refusals, want at least %d: %v", len(audited), len(escapes)*2, audited)
	}
}
