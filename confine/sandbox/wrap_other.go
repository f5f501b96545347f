//go:build !linux

package sandbox

import "os/exec"

func wrapPlatform(*exec.Cmd) {}

// privateRun: no mount namespaces outside Linux, where no init is started.
func privateRun(*exec.Cmd) (bool, error) { return false, nil }
