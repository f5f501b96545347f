//go:build !linux

package builtin

import "github.com/sw4rm/sw4rm-temporal/confine/sandbox"

// defaultSandbox is the confinement of a provider whose Options name none (process.run is
// refused outside Linux anyway).
var defaultSandbox = sandbox.DefaultPolicy
