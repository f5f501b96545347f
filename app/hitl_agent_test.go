package app_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/app"
)

// TestHITLAgentSetting: SW4RM_HITL_AGENT names the HITL agent of the policy every HITL wait
// receives (§15); an id that is no agent_id, or the scheduler's, stops the process naming the
// setting; a server or worker alone with a HITL agent needs the decision key, which vouches
// for the agent's decisions and checks them.
func TestHITLAgentSetting(t *testing.T) {
	t.Setenv("SW4RM_HITL_AGENT", "approvals-bot")
	cfg, err := app.DefaultConfig().FromEnv()
	require.NoError(t, err)
	r, err := cfg.Resolve()
	require.NoError(t, err)
	assert.Equal(t, "approvals-bot", r.HITLPolicy.Agent)

	for _, bad := range []string{"scheduler", "two words", "-dash"} {
		cfg.HITLAgent = bad
		_, err := cfg.Resolve()
		require.Error(t, err, bad)
		assert.Contains(t, err.Error(), "SW4RM_HITL_AGENT")
	}

	cfg.HITLAgent = "approvals-bot"
	for _, roles := range []app.Roles{{Server: true}, {Worker: true}} {
		err := app.CheckHITLKey(cfg, roles)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "has a HITL agent (SW4RM_HITL_AGENT) but no HITL decision key")
	}
	assert.NoError(t, app.CheckHITLKey(cfg, app.Roles{Server: true, Worker: true}), "`sw4rm dev` generates one")
}
