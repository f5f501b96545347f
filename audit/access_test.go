package audit_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// TestAccessLogLevels: refusals are always written; allowed decisions never (refused), always
// (all) or one in n of each kind (sample:n, marked) — and every decision is counted, so the
// ones not written are accounted for.
func TestAccessLogLevels(t *testing.T) {
	for _, tc := range []struct {
		level   audit.AccessLevel
		written uint64 // allowed "x" rows of 10
	}{{audit.AccessRefused, 0}, {audit.AccessAll, 10}, {audit.AccessSample(4), 3}} {
		t.Run(tc.level.String(), func(t *testing.T) {
			st := memory.New()
			defer st.Close()
			l := audit.NewAccessLog(audit.New(nil, st.Audit()), tc.level)
			ctx := context.Background()
			for range 10 {
				l.Allowed(ctx, "x", audit.Event{Type: "x.allowed"})
			}
			l.Allowed(ctx, "y", audit.Event{Type: "y.allowed"})
			l.Refused(ctx, "x", audit.Event{Type: "x.refused"})
			l.Refused(ctx, "x", audit.Event{Type: "x.refused"})

			rows, err := st.Audit().List(ctx, store.AuditFilter{TypePrefix: "x.allowed", Limit: 100})
			require.NoError(t, err)
			assert.Len(t, rows, int(tc.written))
			if tc.level.Every() > 1 && len(rows) > 0 {
				var d map[string]any
				require.NoError(t, json.Unmarshal(rows[0].Details, &d))
				assert.Equal(t, float64(tc.level.Every()), d["sampled_one_in"])
			}
			refused, err := st.Audit().List(ctx, store.AuditFilter{TypePrefix: "x.refused", Limit: 100})
			require.NoError(t, err)
			assert.Len(t, refused, 2, "every refusal is written")

			counts := map[string]audit.AccessCount{}
			for _, c := range l.Counts() {
				key := c.Kind + "/allowed"
				if !c.Allowed {
					key = c.Kind + "/refused"
				}
				counts[key] = c
			}
			assert.Equal(t, audit.AccessCount{Kind: "x", Allowed: true, Decided: 10, Written: tc.written}, counts["x/allowed"])
			assert.Equal(t, audit.AccessCount{Kind: "x", Allowed: false, Decided: 2, Written: 2}, counts["x/refused"])
			assert.Equal(t, uint64(1), counts["y/allowed"].Decided, "each kind is sampled on its own")
		})
	}
	var none *audit.AccessLog
	none.Allowed(context.Background(), "x", audit.Event{})
	none.Refused(context.Background(), "x", audit.Event{})
	assert.Empty(t, none.Counts())
}

// TestParseAccessLevel: the values of SW4RM_AUDIT_ACCESS and their names.
func TestParseAccessLevel(t *testing.T) {
	for text, want := range map[string]audit.AccessLevel{"": audit.AccessRefused, "refused": audit.AccessRefused, " ALL ": audit.AccessAll,
		"sample:1": audit.AccessAll, "sample:100": audit.AccessSample(100), "Sample:3": audit.AccessSample(3)} {
		got, err := audit.ParseAccessLevel(text)
		require.NoError(t, err, text)
		assert.Equal(t, want, got, text)
		again, err := audit.ParseAccessLevel(got.String())
		require.NoError(t, err)
		assert.Equal(t, got, again, "String reads back")
	}
	for _, bad := range []string{"allowed", "sample", "sample:", "sample:0", "sample:-2", "sample:x"} {
		_, err := audit.ParseAccessLevel(bad)
		assert.ErrorContains(t, err, "want refused, all or sample:<n>", bad)
	}
}
