package protocol

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
)

func TestValidateHandoffRequest(t *testing.T) {
	valid := func() *handoffpb.HandoffRequest {
		return &handoffpb.HandoffRequest{RequestId: "h-1", FromAgent: "a", ToAgent: "b", Timeout: durationpb.New(time.Minute)}
	}
	with := func(f func(r *handoffpb.HandoffRequest)) *handoffpb.HandoffRequest {
		r := proto.Clone(valid()).(*handoffpb.HandoffRequest)
		f(r)
		return r
	}
	for name, tc := range map[string]struct {
		req  *handoffpb.HandoffRequest
		ct   string
		want string // "" = valid; else a substring of the refusal
	}{
		"valid":          {valid(), "", ""},
		"routed":         {with(func(r *handoffpb.HandoffRequest) { r.ToAgent, r.CapabilitiesRequired = "", []string{"x"} }), "text/plain", ""},
		"params ignored": {valid(), "application/json; charset=utf-8", ""},
		"nil":            {nil, "", "required"},
		"no request_id":  {with(func(r *handoffpb.HandoffRequest) { r.RequestId = "" }), "", "request_id is required"},
		"bad request_id": {with(func(r *handoffpb.HandoffRequest) { r.RequestId = "a/b" }), "", "request_id"},
		"no from":        {with(func(r *handoffpb.HandoffRequest) { r.FromAgent = "" }), "", "from_agent is required"},
		"no target":      {with(func(r *handoffpb.HandoffRequest) { r.ToAgent = "" }), "", "to_agent or capabilities_required"},
		"to self":        {with(func(r *handoffpb.HandoffRequest) { r.ToAgent = "a" }), "", "itself"},
		"priority high":  {with(func(r *handoffpb.HandoffRequest) { r.Priority = 21 }), "", "priority"},
		"priority low":   {with(func(r *handoffpb.HandoffRequest) { r.Priority = -20 }), "", "priority"},
		"no timeout":     {with(func(r *handoffpb.HandoffRequest) { r.Timeout = nil }), "", "timeout is required"},
		"zero timeout":   {with(func(r *handoffpb.HandoffRequest) { r.Timeout = durationpb.New(0) }), "", "positive"},
		"long timeout":   {with(func(r *handoffpb.HandoffRequest) { r.Timeout = durationpb.New(25 * time.Hour) }), "", "at most"},
		"depth reached": {with(func(r *handoffpb.HandoffRequest) {
			r.Budget = &handoffpb.BudgetEnvelope{CurrentDepth: 3, MaxDelegationDepth: 3}
		}), "", "delegation depth 3 reaches max 3"},
		"depth below": {with(func(r *handoffpb.HandoffRequest) {
			r.Budget = &handoffpb.BudgetEnvelope{CurrentDepth: 2, MaxDelegationDepth: 3}
		}), "", ""},
		"unknown content type": {valid(), "image/png", "content type"},
		"oversize context":     {with(func(r *handoffpb.HandoffRequest) { r.ContextSnapshot = make([]byte, DefaultMaxPayloadBytes+1) }), "", "context_snapshot"},
	} {
		t.Run(name, func(t *testing.T) {
			err := ValidateHandoffRequest(tc.req, tc.ct)
			if tc.want == "" {
				assert.Nil(t, err)
				return
			}
			if assert.NotNil(t, err) {
				assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, err.Code)
				assert.True(t, strings.Contains(err.Msg, tc.want), "%q lacks %q", err.Msg, tc.want)
			}
		})
	}
}
