package builtin

import (
	"context"
	"encoding/base64"
	"io"
	"io/fs"
	"path"
	"unicode/utf8"

	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/tools"
)

// File and directory permissions of what fs.write creates, before the umask.
const (
	filePerm = 0o644
	dirPerm  = 0o755
)

type fsReadArgs struct {
	Path string `json:"path"`
}

type fsReadResult struct {
	Path     string `json:"path"`
	Content  string `json:"content"`
	Encoding string `json:"encoding"`
	Size     int    `json:"size"`
}

// fsRead reads a regular file of the worktree, at most MaxFileBytes of it: a larger file is
// a VALIDATION_ERROR rather than a truncated answer the caller might take for the whole.
func (p *Provider) fsRead(_ context.Context, req tools.Request, _ tools.Emit) (tools.Result, error) {
	var a fsReadArgs
	if err := decodeArgs(req, &a); err != nil {
		return tools.Result{}, err
	}
	if a.Path == "" {
		return tools.Result{}, tool.Errorf(tool.CodeValidation, "tool %q: path is required", req.ToolName)
	}
	root, err := p.openWorktree(req)
	if err != nil {
		return tools.Result{}, err
	}
	defer func() { _ = root.Close() }()
	f, err := root.Open(a.Path)
	if err != nil {
		return tools.Result{}, fileError(req.ToolName, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return tools.Result{}, fileError(req.ToolName, err)
	}
	if fi.IsDir() {
		return tools.Result{}, tool.Errorf(tool.CodeValidation, "tool %q: %q is a directory (list it with %s)", req.ToolName, a.Path, ToolFSList)
	}
	if fi.Size() > int64(p.opts.MaxFileBytes) {
		return tools.Result{}, p.tooLarge(req.ToolName, a.Path, fi.Size())
	}
	// The file may grow between Stat and the read; the limit holds anyway.
	data, err := io.ReadAll(io.LimitReader(f, int64(p.opts.MaxFileBytes)+1))
	if err != nil {
		return tools.Result{}, fileError(req.ToolName, err)
	}
	if len(data) > p.opts.MaxFileBytes {
		return tools.Result{}, p.tooLarge(req.ToolName, a.Path, int64(len(data)))
	}
	res := fsReadResult{Path: a.Path, Content: string(data), Encoding: EncodingUTF8, Size: len(data)}
	if !utf8.Valid(data) {
		// JSON would replace the invalid bytes silently; base64 keeps them.
		res.Content, res.Encoding = base64.StdEncoding.EncodeToString(data), EncodingBase64
	}
	return jsonResult(req.ToolName, res)
}

func (p *Provider) tooLarge(name, file string, size int64) error {
	return tool.Errorf(tool.CodeValidation, "tool %q: %q is %d bytes, more than the %d this provider reads or writes at once", name, file, size, p.opts.MaxFileBytes)
}

type fsWriteArgs struct {
	Path       string `json:"path"`
	Content    string `json:"content"`
	Encoding   string `json:"encoding"`
	CreateDirs bool   `json:"create_dirs"`
}

type fsWriteResult struct {
	Path string `json:"path"`
	Size int    `json:"size"`
}

// fsWrite creates or replaces a file of the worktree. confine refuses writes into .git and
// through links out of the worktree.
func (p *Provider) fsWrite(_ context.Context, req tools.Request, _ tools.Emit) (tools.Result, error) {
	var a fsWriteArgs
	if err := decodeArgs(req, &a); err != nil {
		return tools.Result{}, err
	}
	if a.Path == "" {
		return tools.Result{}, tool.Errorf(tool.CodeValidation, "tool %q: path is required", req.ToolName)
	}
	data := []byte(a.Content)
	switch a.Encoding {
	case "", EncodingUTF8:
	case EncodingBase64:
		var err error
		if data, err = base64.StdEncoding.DecodeString(a.Content); err != nil {
			return tools.Result{}, tool.Errorf(tool.CodeValidation, "tool %q: content is not base64: %v", req.ToolName, err)
		}
	default:
		return tools.Result{}, tool.Errorf(tool.CodeValidation, "tool %q: encoding %q is not %q or %q", req.ToolName, a.Encoding, EncodingUTF8, EncodingBase64)
	}
	if len(data) > p.opts.MaxFileBytes {
		return tools.Result{}, p.tooLarge(req.ToolName, a.Path, int64(len(data)))
	}
	root, err := p.openWorktree(req)
	if err != nil {
		return tools.Result{}, err
	}
	defer func() { _ = root.Close() }()
	if a.CreateDirs {
		if dir := path.Dir(a.Path); dir != "." && dir != "/" {
			if err := root.MkdirAll(dir, dirPerm); err != nil {
				return tools.Result{}, fileError(req.ToolName, err)
			}
		}
	}
	if err := root.WriteFile(a.Path, data, filePerm); err != nil {
		return tools.Result{}, fileError(req.ToolName, err)
	}
	return jsonResult(req.ToolName, fsWriteResult{Path: a.Path, Size: len(data)})
}

type fsListArgs struct {
	Path string `json:"path"`
}

type fsEntry struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Size int64  `json:"size"`
}

type fsListResult struct {
	Entries   []fsEntry `json:"entries"`
	Truncated bool      `json:"truncated,omitempty"`
}

// fsList lists a directory of the worktree, sorted by name, at most MaxListEntries entries.
// A symbolic link is listed as itself (type symlink), not followed.
func (p *Provider) fsList(_ context.Context, req tools.Request, _ tools.Emit) (tools.Result, error) {
	var a fsListArgs
	if err := decodeArgs(req, &a); err != nil {
		return tools.Result{}, err
	}
	if a.Path == "" {
		a.Path = "."
	}
	root, err := p.openWorktree(req)
	if err != nil {
		return tools.Result{}, err
	}
	defer func() { _ = root.Close() }()
	entries, err := root.ReadDir(a.Path)
	if err != nil {
		return tools.Result{}, fileError(req.ToolName, err)
	}
	res := fsListResult{Entries: make([]fsEntry, 0, min(len(entries), p.opts.MaxListEntries))}
	if len(entries) > p.opts.MaxListEntries {
		entries, res.Truncated = entries[:p.opts.MaxListEntries], true
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			// Removed since the listing was read: it is no longer there to list.
			continue
		}
		res.Entries = append(res.Entries, fsEntry{Name: e.Name(), Type: entryType(fi.Mode()), Size: max(fi.Size(), 0)})
	}
	return jsonResult(req.ToolName, res)
}

func entryType(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "file"
	case m.IsDir():
		return "dir"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "other"
}
