//go:build !unix

package confine

import (
	"errors"
	"os/exec"
)

// openGuardFlags is empty where O_NONBLOCK and O_NOCTTY do not exist.
const openGuardFlags = 0

// errNotDir is the error of a path that goes through a file as if it were a directory.
var errNotDir = errors.New("not a directory")

// ownProcessGroup leaves the command as exec makes it where process groups do not exist.
func ownProcessGroup(*exec.Cmd) {}
