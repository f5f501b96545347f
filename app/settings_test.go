package app

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/confine/sandbox"
	"github.com/sw4rm/sw4rm-temporal/frontend"
	"github.com/sw4rm/sw4rm-temporal/reconcile"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/store/postgres"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// TestEveryFieldIsOneSetting: each Config field but ToolExecutors and PhysicalClock is the target of exactly
// one setting, so no setting can be declared without a field, nor a field without its flag
// and variable; each flag and variable is unique, the variable is the flag's name in
// SW4RM_UPPER_CASE, and no help holds a backquote (pflag would read it as the value's name).
func TestEveryFieldIsOneSetting(t *testing.T) {
	var c Config
	v := reflect.ValueOf(&c).Elem()
	fields := map[uintptr]string{}
	for i := range v.NumField() {
		fields[v.Field(i).Addr().Pointer()] = v.Type().Field(i).Name
	}
	bound := map[string]string{}
	flags, envs := map[string]bool{}, map[string]bool{}
	for _, s := range settings {
		name, ok := fields[reflect.ValueOf(s.bind.target(&c)).Pointer()]
		require.True(t, ok, "%s lands in no field of Config", s.Env)
		assert.Empty(t, bound[name], "%s and %s both land in Config.%s", bound[name], s.Env, name)
		bound[name] = s.Env
		assert.False(t, flags[s.Flag], "flag --%s declared twice", s.Flag)
		assert.False(t, envs[s.Env], "variable %s declared twice", s.Env)
		flags[s.Flag], envs[s.Env] = true, true
		assert.Equal(t, "SW4RM_"+strings.ToUpper(strings.ReplaceAll(s.Flag, "-", "_")), s.Env, "the variable is named after the flag")
		assert.NotContains(t, s.Help, "`", s.Env)
		assert.NotEmpty(t, s.Help, s.Env)
	}
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if name != "ToolExecutors" && name != "PhysicalClock" {
			assert.NotEmpty(t, bound[name], "Config.%s has no setting", name)
		}
	}
}

// TestDefaults: the defaults derived from the table are the documented ones.
func TestDefaults(t *testing.T) {
	want := Config{
		TemporalAddress: "127.0.0.1:7233", Namespace: "default", TaskQueue: "sw4rm", WorkerStopTimeout: DefaultWorkerStopTimeout, GRPCAddr: ":50051", HTTPAddr: ":8080",
		BufferCapacity: router.DefaultBufferCapacity, MaxPayloadBytes: 1 << 20, StreamKeepAlive: frontend.DefaultStreamKeepAlive, AgentInitTimeout: 60 * time.Second,
		HeartbeatInterval: 30 * time.Second, HeartbeatMisses: 3, DeliveryLease: router.DefaultLease, HITLTimeout: time.Hour,
		RoomTimeout: 10 * time.Minute, HandoffCompletionTimeout: time.Hour, RoomStrategy: "confidence_weighted", AckTimeout: router.DefaultAckTimeout,
		MaxRetries: router.DefaultMaxRetries, DedupWindow: router.DefaultDedupWindow, StreamRetention: router.DefaultStreamRetention,
		DLQRetention: router.DefaultDLQRetention, AuditRetention: router.DefaultAuditRetention, MessageRetention: router.DefaultMessageRetention,
		HandoffRetention: router.DefaultHandoffRetention, HITLRetention: router.DefaultHITLRetention, ToolCallRetention: router.DefaultToolCallRetention,
		PrivilegedRate: router.DefaultPrivilegedRate, PrivilegedBurst: router.DefaultPrivilegedBurst,
		LaneWeights: router.DefaultLaneWeights, ConflictThreshold: 0.7, PreemptTimeout: 10 * time.Minute, TerminateGrace: 3 * time.Second,
		AgentHistoryLimit: workflows.AgentHistoryLimit, Auth: auth.Off, AuthClockSkew: frontend.DefaultClockSkew, KeyOverlap: frontend.DefaultKeyOverlap, AuditAccess: frontend.AuditRefused,
		GroupCommitFlushers:       postgres.DefaultGroupCommitFlushers,
		ActivityReconcileInterval: reconcile.DefaultInterval, ActivityReconcileGrace: reconcile.DefaultGrace,
		ToolApprovalTimeout: 10 * time.Minute,
		ToolMaxProcs:        sandbox.DefaultProcs, ToolMaxFileBytes: sandbox.DefaultFileBytes,
		ToolMaxMemoryBytes: sandbox.DefaultMemoryBytes, ToolMaxOpenFiles: sandbox.DefaultOpenFiles,
	}
	assert.Equal(t, want, DefaultConfig())
}

// validTexts are two valid values of each kind of setting, A for the variable and B for the
// flag; the settings whose values are no plain numbers, durations or strings have their own.
var validTexts = map[string][2]string{
	"string": {"from-env", "from-flag"}, "int": {"7", "9"}, "duration": {"7s", "9s"}, "float64": {"0.3", "0.5"},
	"lane-weights": {"1,2,3", "3,2,1"}, "auth": {"optional", "required"}, "log-level": {"debug", "warn"},
	"audit-access": {"all", "refused"}, "bool": {"true", "false"},
}

// TestFlagOverVariable: for every setting, the variable wins over the default and a flag set
// on the command line over the variable; a flag the command line did not set leaves the
// variable alone.
func TestFlagOverVariable(t *testing.T) {
	for _, s := range settings {
		texts, ok := validTexts[s.Flag]
		if !ok {
			texts = validTexts[s.bind.kind()]
		}
		t.Setenv(s.Env, texts[0])
		f := NewFlags()
		require.NoError(t, f.FlagSet().Parse(nil))
		c, err := f.Config()
		require.NoError(t, err, s.Env)
		assert.Equal(t, texts[0], s.bind.format(&c), "%s wins over the default", s.Env)

		f = NewFlags()
		// --flag=value: the one form an on/off flag, which alone means true, reads a value in.
		require.NoError(t, f.FlagSet().Parse([]string{"--" + s.Flag + "=" + texts[1]}))
		c, err = f.Config()
		require.NoError(t, err, s.Env)
		assert.Equal(t, texts[1], s.bind.format(&c), "--%s wins over %s", s.Flag, s.Env)
	}
}

// TestMalformedValues: a number, duration, mode, level or other enumerated value that does
// not parse is refused from its variable with an error naming the variable, and from its flag
// naming the flag.
func TestMalformedValues(t *testing.T) {
	for _, s := range settings {
		if _, own := validTexts[s.Flag]; s.bind.kind() == "string" && !own {
			continue // free text: Resolve checks the structured ones
		}
		t.Run(s.Flag, func(t *testing.T) {
			t.Setenv(s.Env, "-1")
			_, err := DefaultConfig().FromEnv()
			require.Error(t, err)
			assert.Contains(t, err.Error(), s.Env+`="-1": want`)
			require.NoError(t, os.Unsetenv(s.Env))
			err = NewFlags().FlagSet().Parse([]string{"--" + s.Flag + "=-1"})
			require.Error(t, err)
			assert.Contains(t, err.Error(), "--"+s.Flag)
		})
	}
}

// TestAuditAccessSetting: SW4RM_AUDIT_ACCESS reads refused and all (any case, empty is
// refused), refuses anything else naming the variable, and reaches the authenticator's
// configuration.
func TestAuditAccessSetting(t *testing.T) {
	for text, want := range map[string]frontend.AccessAudit{"": frontend.AuditRefused, "refused": frontend.AuditRefused, "all": frontend.AuditAll, " ALL ": frontend.AuditAll,
		"sample:10": audit.AccessSample(10), "sample:1": frontend.AuditAll} {
		t.Setenv("SW4RM_AUDIT_ACCESS", text)
		c, err := DefaultConfig().FromEnv()
		require.NoError(t, err, text)
		assert.Equal(t, want, c.AuditAccess, text)
		assert.Equal(t, want, authConfig(Resolved{Config: c}, nil, nil, nil).Audit, text)
	}
	for _, bad := range []string{"allowed", "sample:0", "sample:x", "sample:"} {
		t.Setenv("SW4RM_AUDIT_ACCESS", bad)
		_, err := DefaultConfig().FromEnv()
		require.Error(t, err, bad)
		assert.Contains(t, err.Error(), `SW4RM_AUDIT_ACCESS="`+bad+`": want refused, all or sample:<n>`)
	}
}

// TestVerboseSetting: --verbose alone turns the event stream on the terminal on; SW4RM_VERBOSE
// reads 1, true or false, and empty as off; the flag wins over the variable.
func TestVerboseSetting(t *testing.T) {
	for env, want := range map[string]bool{"1": true, "true": true, "false": false, "0": false, "": false} {
		t.Setenv("SW4RM_VERBOSE", env)
		c, err := DefaultConfig().FromEnv()
		require.NoError(t, err, env)
		assert.Equal(t, want, c.Verbose, "SW4RM_VERBOSE=%q", env)
	}
	t.Setenv("SW4RM_VERBOSE", "false")
	f := NewFlags()
	require.NoError(t, f.FlagSet().Parse([]string{"--verbose"}))
	c, err := f.Config()
	require.NoError(t, err)
	assert.True(t, c.Verbose, "--verbose alone means on")
	assert.Empty(t, f.FlagSet().Args(), "and takes no value")
}
