package memory_test

import (
	"testing"

	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
	"github.com/sw4rm/sw4rm-temporal/store/storetest"
)

func TestActivityConformance(t *testing.T) {
	storetest.RunActivity(t, func(t *testing.T) store.Store {
		s := memory.New()
		t.Cleanup(s.Close)
		return s
	})
}

// TestActivityBufferPerStore checks that each Store has its own activity buffer and that one
// Store always hands out the same one.
func TestActivityBufferPerStore(t *testing.T) {
	a, b := memory.New(), memory.New()
	defer a.Close()
	defer b.Close()
	_, err := a.ActivityBuffer().Put(t.Context(), storetest.ActivityEntry("alice", "t1"), store.ActivityLimits{})
	if err != nil {
		t.Fatal(err)
	}
	if es, _ := a.ActivityBuffer().List(t.Context(), store.ActivityFilter{}); len(es) != 1 {
		t.Fatalf("store a lists %d entries, want 1", len(es))
	}
	if es, _ := b.ActivityBuffer().List(t.Context(), store.ActivityFilter{}); len(es) != 0 {
		t.Fatalf("store b lists %d entries, want 0", len(es))
	}
}
