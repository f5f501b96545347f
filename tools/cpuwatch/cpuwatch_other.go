//go:build !linux

package cpuwatch

import (
	"errors"
	"os/exec"
	"time"
)

// Watch measures nothing outside Linux: Prepare always fails, so a budget is refused rather
// than ignored.
type Watch struct{}

// New fails: CPU time is measured only on Linux.
func New() (*Watch, error) {
	return nil, errors.New("CPU time is measured only on Linux")
}

// Prepare fails: CPU time is measured only on Linux.
func Prepare(*exec.Cmd) (*Watch, error) { return New() }

// Apply does nothing.
func (w *Watch) Apply(*exec.Cmd) {}

// Mechanism is empty: nothing is measured.
func (w *Watch) Mechanism() Mechanism { return "" }

// Exact is false: nothing is measured.
func (w *Watch) Exact() bool { return false }

// Started does nothing.
func (w *Watch) Started(int, int) {}

// Used is 0.
func (w *Watch) Used() time.Duration { return 0 }

// Kill does nothing.
func (w *Watch) Kill() {}

// Close does nothing.
func (w *Watch) Close() {}

// CgroupAvailable is false outside Linux.
func CgroupAvailable() bool { return false }

// ForceProc does nothing outside Linux.
func ForceProc() (restore func()) { return func() {} }
