package test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/loadgen"
)

// TestLoadgen runs the load generator with every pattern against server and worker on the
// PostgreSQL store for 20 s: each pattern completes operations, and none is lost, doubled
// or stranded once the drain is over. The figures of the processes and the store are read.
func TestLoadgen(t *testing.T) {
	if testing.Short() {
		t.Skip("a 20 s load run")
	}
	cfg := newConfig(t, "postgres")
	const token = "loadgen-operator-token"
	cfg.HITLOperators = "loadgen=" + token
	cfg.HITLDecisionKeyFile = writeKeyFile(t, decisionKeySeed)
	sys := start(t, cfg)

	var out bytes.Buffer
	var reports []loadgen.Report
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum, err := loadgen.Run(ctx, loadgen.Config{
		Addr:          sys.app.GRPCAddr(),
		Duration:      20 * time.Second,
		Drain:         30 * time.Second,
		Interval:      5 * time.Second,
		OperatorToken: token,
		AgentPrefix:   uniq(t, "lg"),
		MetricsURLs:   []string{sys.app.HTTPScheme() + "://" + sys.app.HTTPAddr() + "/metrics"},
		DatabaseURL:   cfg.DatabaseURL,
		OnReport:      func(r loadgen.Report) { reports = append(reports, r) },
	}, &out)
	t.Log("\n" + out.String())
	require.NoError(t, err)
	require.NotEmpty(t, reports)
	assert.Equal(t, "final", reports[len(reports)-1].Phase)
	for _, p := range loadgen.AllPatterns {
		pr, ok := sum.Final.Pattern(p)
		if !assert.True(t, ok, "pattern %s ran", p) {
			continue
		}
		assert.Positive(t, pr.Completed, "%s completed operations", p)
		assert.Zero(t, pr.Lost, "%s lost", p)
		assert.Zero(t, pr.Doubled, "%s doubled", p)
		assert.Zero(t, pr.Stranded, "%s stranded", p)
		assert.Zero(t, pr.Failed+pr.Refused+pr.Unanswered, "%s failed, refused or unanswered: %+v", p, pr)
	}
	tasks, _ := sum.Final.Pattern(loadgen.Tasks)
	assert.Positive(t, tasks.Notes["preempted"], "the high-priority tasks preempted the low ones")
	require.Len(t, sum.Final.Processes, 1)
	assert.Empty(t, sum.Final.Processes[0].Error)
	assert.Positive(t, sum.Final.Processes[0].Goroutines)
	require.NotNil(t, sum.Final.Store)
	assert.Empty(t, sum.Final.Store.Error)
	assert.Positive(t, sum.Final.Store.TotalBytes)
	assert.True(t, strings.Contains(out.String(), "loadgen final"), "the final report is printed")
}
