package app

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRetentionKeepForever: a retention setting of 0 ("keep forever") reaches the router as a
// negative retention, which it never prunes, and any other value as itself.
func TestRetentionKeepForever(t *testing.T) {
	t.Setenv("SW4RM_AUDIT_RETENTION", "0")
	t.Setenv("SW4RM_HITL_RETENTION", "36h")
	cfg, err := DefaultConfig().FromEnv()
	require.NoError(t, err)
	rc := routerConfig(cfg, nil)
	require.Negative(t, rc.AuditRetention)
	require.Equal(t, 36*time.Hour, rc.HITLRetention)
	require.Equal(t, 7*24*time.Hour, rc.ToolCallRetention, "unset: the default")
}
