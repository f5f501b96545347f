package loadgen

import (
	"fmt"
	"time"
)

// Summary is what Run returns: every report it made and the final one.
type Summary struct {
	// Reports are the interval reports, in order (the final one is not among them).
	Reports []Report `json:"reports"`
	// Final is the report after the drain, with the final accounting.
	Final Report `json:"final"`
}

// Baseline is the report Flat compares the end with: the first interval report made after
// at least one completed operation, or the final report when there is none.
func (s Summary) Baseline() Report { return s.BaselineAfter(0) }

// BaselineAfter is the first interval report made at least warm into the run and after at
// least one completed operation, or the final report when there is none: caches (the SDK's
// workflow cache, Temporal's history and mutable-state caches) fill during the first
// minutes of a long run, which is warm-up, not growth.
func (s Summary) BaselineAfter(warm time.Duration) Report {
	for _, r := range s.Reports {
		if r.Completed() > 0 && r.Elapsed >= warm {
			return r
		}
	}
	return s.Final
}

// Flat judges whether the deployment's resources stayed flat over the run: each process's
// memory at the end is at most (1+tolerance) times what it was at the baseline (the first
// report with completed work, normally after the first minute) — its live heap when both
// samples have one; else its heap in use, allowed twice the tolerance plus one, since heap in
// use swings up to twice the live heap between two collections — and so are its goroutines;
// the Temporal history and the store, per completed operation, are at most (1+tolerance)
// times what they were per completed operation at the baseline. A figure that was not
// measured both times is not judged. It returns true when nothing grew beyond tolerance, and
// otherwise says what did.
func Flat(s Summary, tolerance float64) (bool, []string) { return FlatAfter(s, tolerance, 0) }

// FlatAfter is Flat with the baseline taken at least warm into the run (BaselineAfter).
func FlatAfter(s Summary, tolerance float64, warm time.Duration) (bool, []string) {
	base, end := s.BaselineAfter(warm), s.Final
	var why []string
	for _, e := range end.Processes {
		for _, b := range base.Processes {
			if b.URL != e.URL || b.Error != "" || e.Error != "" {
				continue
			}
			switch {
			case b.LiveHeapBytes > 0 && e.LiveHeapBytes > 0:
				if e.LiveHeapBytes > b.LiveHeapBytes*(1+tolerance) {
					why = append(why, fmt.Sprintf("%s: live heap grew from %s to %s (tolerance %.0f%%)", e.Name,
						mib(b.LiveHeapBytes), mib(e.LiveHeapBytes), tolerance*100))
				}
			case b.HeapInuseBytes > 0:
				if tol := 2*tolerance + 1; e.HeapInuseBytes > b.HeapInuseBytes*(1+tol) {
					why = append(why, fmt.Sprintf("%s: heap in use grew from %s to %s (tolerance %.0f%%)", e.Name,
						mib(b.HeapInuseBytes), mib(e.HeapInuseBytes), tol*100))
				}
			}
			if b.Goroutines > 0 && e.Goroutines > b.Goroutines*(1+tolerance) {
				why = append(why, fmt.Sprintf("%s: goroutines grew from %.0f to %.0f (tolerance %.0f%%)", e.Name,
					b.Goroutines, e.Goroutines, tolerance*100))
			}
		}
	}
	perOp := func(name string, b, e *DatabaseReport) {
		if b == nil || e == nil || b.Error != "" || e.Error != "" || base.Completed() == 0 || end.Completed() == 0 {
			return
		}
		pb := float64(b.TotalBytes) / float64(base.Completed())
		pe := float64(e.TotalBytes) / float64(end.Completed())
		if pe > pb*(1+tolerance) {
			why = append(why, fmt.Sprintf("%s per completed operation grew from %.0f to %.0f bytes (tolerance %.0f%%)", name, pb, pe, tolerance*100))
		}
	}
	perOp("temporal history", base.History, end.History)
	perOp("store", base.Store, end.Store)
	return len(why) == 0, why
}
