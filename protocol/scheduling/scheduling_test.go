package scheduling

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
)

func TestValidateSubmit(t *testing.T) {
	ok := func() *schedulerpb.SubmitTaskRequest {
		return &schedulerpb.SubmitTaskRequest{AgentId: "a", TaskId: "t1", Scope: "repo:app", Params: []byte("{}")}
	}
	assert.Nil(t, ValidateSubmit(ok(), 0))
	for name, tc := range map[string]struct {
		edit func(*schedulerpb.SubmitTaskRequest)
		want string
	}{
		"no task_id": {func(r *schedulerpb.SubmitTaskRequest) { r.TaskId = "" }, "task_id is required"},
		"spaced id":  {func(r *schedulerpb.SubmitTaskRequest) { r.TaskId = "a b" }, "printable characters"},
		"long id":    {func(r *schedulerpb.SubmitTaskRequest) { r.TaskId = strings.Repeat("t", MaxTaskIDLen+1) }, "printable characters"},
		"priority":   {func(r *schedulerpb.SubmitTaskRequest) { r.Priority = 21 }, "priority 21 is outside"},
		"no scope":   {func(r *schedulerpb.SubmitTaskRequest) { r.Scope = " " }, "scope is required"},
		"no agent":   {func(r *schedulerpb.SubmitTaskRequest) { r.AgentId = "" }, "agent_id"},
	} {
		r := ok()
		tc.edit(r)
		perr := ValidateSubmit(r, 0)
		if assert.NotNil(t, perr, name) {
			assert.Contains(t, perr.Msg, tc.want, name)
		}
	}
	big := ValidateSubmit(ok(), 1)
	require.NotNil(t, big)
	assert.Equal(t, commonpb.ErrorCode_OVERSIZE_PAYLOAD, big.Code)
}

func TestParseFlag(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   bool
		bad    bool
	}{
		{nil, false, false}, {[]string{"TRUE"}, true, false}, {[]string{"1"}, true, false}, {[]string{"0"}, false, false},
		{[]string{"yes"}, false, true}, {[]string{"true", "true"}, false, true},
	} {
		got, perr := ParseFlag("k", tc.values)
		assert.Equal(t, tc.bad, perr != nil, "%v", tc.values)
		assert.Equal(t, tc.want, got, "%v", tc.values)
	}
}

func TestValidateShutdown(t *testing.T) {
	g, perr := ValidateShutdown(&schedulerpb.ShutdownAgentRequest{AgentId: "a"}, 30*time.Second)
	require.Nil(t, perr)
	assert.Equal(t, 30*time.Second, g)
	g, perr = ValidateShutdown(&schedulerpb.ShutdownAgentRequest{AgentId: "a", GracePeriod: durationpb.New(time.Second)}, 30*time.Second)
	require.Nil(t, perr)
	assert.Equal(t, time.Second, g)
	_, perr = ValidateShutdown(&schedulerpb.ShutdownAgentRequest{AgentId: "a", GracePeriod: durationpb.New(-time.Second)}, 0)
	assert.Contains(t, perr.Msg, "must not be negative")
	_, perr = ValidateShutdown(&schedulerpb.ShutdownAgentRequest{}, 0)
	assert.NotNil(t, perr)
}

func TestValidatePurge(t *testing.T) {
	assert.Nil(t, ValidatePurge(&schedulerpb.PurgeActivityRequest{AgentId: "a", TaskIds: []string{"t"}}))
	assert.Contains(t, ValidatePurge(&schedulerpb.PurgeActivityRequest{TaskIds: []string{"t"}}).Msg, "agent_id is required")
	assert.Contains(t, ValidatePurge(&schedulerpb.PurgeActivityRequest{AgentId: "a"}).Msg, "at least one task_id")
	assert.Contains(t, ValidatePurge(&schedulerpb.PurgeActivityRequest{AgentId: "a", TaskIds: make([]string, MaxPurgeTaskIDs+1)}).Msg, "at most")
}
