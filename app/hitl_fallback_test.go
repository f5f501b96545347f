package app_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/app"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
)

// TestHITLUnavailablePolicySettings: SW4RM_HITL_UNAVAILABLE_POLICY and its companions become
// the deployment's fallback that every HITL wait receives (hitl.Policy.Fallback, §15.4);
// unset, there is none (DENY_BY_DEFAULT applies). An unknown policy, AUTO_DECIDE_THRESHOLD
// without a threshold, more than 3 extensions, or a value the chosen policy would ignore stop
// the process with an error naming the setting.
func TestHITLUnavailablePolicySettings(t *testing.T) {
	t.Setenv("SW4RM_HITL_UNAVAILABLE_POLICY", "extend_timeout")
	t.Setenv("SW4RM_HITL_MAX_EXTENSIONS", "2")
	t.Setenv("SW4RM_HITL_EXTEND_BY", "30s")
	cfg, err := app.DefaultConfig().FromEnv()
	require.NoError(t, err)
	r, err := cfg.Resolve()
	require.NoError(t, err)
	assert.Equal(t, &hitl.Fallback{Policy: hitl.ExtendTimeout, MaxExtensions: 2, ExtendBy: 30 * time.Second}, r.HITLPolicy.Fallback)

	cfg = app.DefaultConfig()
	cfg.HITLUnavailablePolicy, cfg.HITLAutoThreshold = "AUTO_DECIDE_THRESHOLD", 0.8
	r, err = cfg.Resolve()
	require.NoError(t, err)
	assert.Equal(t, &hitl.Fallback{Policy: hitl.AutoDecideThreshold, Threshold: 0.8}, r.HITLPolicy.Fallback)

	r, err = app.DefaultConfig().Resolve()
	require.NoError(t, err)
	assert.Nil(t, r.HITLPolicy.Fallback, "none configured: DENY_BY_DEFAULT")

	for _, tc := range []struct {
		env, flag string
		set       func(*app.Config)
	}{
		{"SW4RM_HITL_UNAVAILABLE_POLICY", "--hitl-unavailable-policy", func(c *app.Config) { c.HITLUnavailablePolicy = "ASK_AGAIN" }},
		{"SW4RM_HITL_AUTO_THRESHOLD", "--hitl-auto-threshold", func(c *app.Config) { c.HITLUnavailablePolicy = "AUTO_DECIDE_THRESHOLD" }},
		{"SW4RM_HITL_AUTO_THRESHOLD", "--hitl-auto-threshold", func(c *app.Config) { c.HITLAutoThreshold = 0.5 }},
		{"SW4RM_HITL_MAX_EXTENSIONS", "--hitl-max-extensions", func(c *app.Config) {
			c.HITLUnavailablePolicy, c.HITLMaxExtensions = "EXTEND_TIMEOUT", 4
		}},
		{"SW4RM_HITL_EXTEND_BY", "--hitl-extend-by", func(c *app.Config) {
			c.HITLUnavailablePolicy, c.HITLExtendBy = "DENY_BY_DEFAULT", time.Minute
		}},
	} {
		cfg := app.DefaultConfig()
		tc.set(&cfg)
		_, err := cfg.Resolve()
		require.Error(t, err, tc.env)
		assert.Contains(t, err.Error(), tc.env+" ("+tc.flag+")")
	}
}
