package main

import (
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// In dev the CLI finds the dev operator's token itself: `sw4rm dev`, when it configures the
// default operator (app.DevHITLOperators), writes its token to a file in the user's cache
// directory, and an operator command given no --token and no SW4RM_OPERATOR_TOKEN reads it
// when the server it talks to is on this machine.
//
// The file is left when the server stops: the token is app.DevHITLOperators' public
// constant, so the file discloses nothing, and removing it at exit would take it from
// under a second `sw4rm dev` still running. A `sw4rm dev` without the default operator
// removes it instead, so the CLI never offers that server a token it does not know.

// devTokenName is the token file's name in its directory.
const devTokenName = "dev-operator-token"

// userCacheDir is where the token file's directory lives: os.UserCacheDir ($XDG_CACHE_HOME
// or ~/.cache on Linux, ~/Library/Caches on macOS); tests point it elsewhere.
var userCacheDir = os.UserCacheDir

// devTokenPath is the token file: <user cache dir>/sw4rm/dev-operator-token.
func devTokenPath() (string, error) {
	dir, err := userCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "sw4rm", devTokenName), nil
}

// saveDevToken writes the dev operator's token for the CLI, readable by the user alone; a
// failure costs only the convenience, so it is logged, not returned.
func saveDevToken(token string, log *slog.Logger) {
	path, err := devTokenPath()
	if err == nil {
		err = writePrivate(path, []byte(token+"\n"))
	}
	if err != nil {
		log.Warn("dev role: could not leave the dev operator's token for the CLI; pass --token or set SW4RM_OPERATOR_TOKEN", "err", err)
		return
	}
	log.Info("dev role: the CLI on this machine finds the dev operator's token itself", "file", path)
}

// forgetDevToken removes the token file a `sw4rm dev` with the default operator left.
func forgetDevToken(log *slog.Logger) {
	path, err := devTokenPath()
	if err != nil {
		return
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.Warn("dev role: could not remove the dev operator's token file", "file", path, "err", err)
	}
}

// writePrivate writes b to path with mode 0600 in a directory of mode 0700, through a
// temporary file renamed into place, so that a reader never sees half a token.
func writePrivate(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+devTokenName+"-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // gone after the rename; left only on failure
	if _, err := tmp.Write(b); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// CreateTemp makes the file 0600 already; say so rather than rely on it.
	if err := os.Chmod(tmp.Name(), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// devToken is the token `sw4rm dev` left for the CLI, when server is a loopback address and
// the file is there; "" otherwise. A token is never sent to another machine this way.
func devToken(server string) string {
	if !isLoopback(server) {
		return ""
	}
	path, err := devTokenPath()
	if err != nil {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// isLoopback reports whether a gRPC target names this machine over loopback: host
// localhost, a loopback IP or none (":50051"), optionally behind the dns:/// or
// passthrough:/// scheme.
func isLoopback(target string) bool {
	for _, scheme := range []string{"dns:///", "passthrough:///"} {
		target = strings.TrimPrefix(target, scheme)
	}
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return false
	}
	if host == "" || strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
