//go:build !linux

package builtin

// RunInitIfAsked does nothing where process.run is not available (it needs Linux).
func RunInitIfAsked() {}
