//go:build !linux

package sandbox

import "errors"

// available: Landlock is Linux's.
func available() error { return errors.New("Landlock confinement is Linux's") }

// ABI is 0: no Landlock outside Linux.
func ABI() int { return 0 }

// ApplyFromEnv does nothing outside Linux, where no init is started.
func ApplyFromEnv() error { return nil }

func newPidsCgroup(int) string { return "" }

func pidsLimitHit(string) bool { return false }

func removeCgroup(string) {}
