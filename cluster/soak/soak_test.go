package soak

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sw4rm/sw4rm-temporal/loadgen"
)

// TestSchedule: the CI profile is one round, spaced, ending before the quiet stretch; a
// cycle repeats the round; a fault that would still be down in the quiet stretch is left out.
func TestSchedule(t *testing.T) {
	s := time.Second
	got := Schedule(3*time.Minute, 25*s, 0, time.Minute, 3*s, "server-1", "worker-2", "temporal", "postgres")
	assert.Equal(t, []Fault{{25 * s, "server-1", 3 * s}, {50 * s, "worker-2", 3 * s}, {75 * s, "temporal", 3 * s}, {100 * s, "postgres", 3 * s}}, got)

	got = Schedule(11*time.Minute+40*s, 25*s, 5*time.Minute, time.Minute, 3*s, "a", "b")
	var at []time.Duration
	for _, f := range got {
		at = append(at, f.At)
	}
	assert.Equal(t, []time.Duration{25 * s, 50 * s, 5*time.Minute + 25*s, 5*time.Minute + 50*s, 10*time.Minute + 25*s}, at,
		"10:50 + 3 s down reaches into the quiet stretch from 10:40")
	assert.Empty(t, Schedule(time.Minute, 25*s, 0, time.Minute, 3*s, "a"), "a load no longer than the quiet stretch has no fault")
	assert.Equal(t, "1:15 kill -9 temporal (down 3s)", Fault{75 * s, "temporal", 3 * s}.String())
}

// TestProblems: lost, doubled or stranded work, a pattern with nothing completed, a fault
// that could not be healed and growth each fail the soak; a clean run has no problem.
func TestProblems(t *testing.T) {
	clean := Result{Flat: true, Summary: loadgen.Summary{Final: loadgen.Report{Patterns: []loadgen.PatternReport{
		{Pattern: loadgen.Messages, Completed: 10}, {Pattern: loadgen.Tasks, Completed: 3}}}}}
	assert.Empty(t, clean.Problems())

	bad := clean
	bad.Summary.Final.Patterns = []loadgen.PatternReport{{Pattern: loadgen.Messages, Completed: 10, Lost: 1}, {Pattern: loadgen.Tasks}}
	bad.Faults = []FaultRecord{{Fault: Fault{Proc: "temporal"}, Err: "start: not ready"}}
	bad.Flat, bad.Why = false, []string{"worker-1: live heap grew"}
	p := bad.Problems()
	assert.Len(t, p, 4)
	assert.Contains(t, p[0], "1 lost, 0 doubled, 0 stranded")
	assert.Contains(t, p[1], "pattern tasks completed nothing")
	assert.Contains(t, p[2], "start: not ready")
	assert.Contains(t, p[3], "live heap grew")
}
