// Package scheduling holds the checks of SchedulerService requests (§7.1, §8.4, §9.2, §10)
// that need nothing but the request: the frontend runs them before it reads the registry or
// reaches a workflow. Like package protocol it does no I/O.
package scheduling

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/inference"
)

// MaxTaskIDLen bounds task_id, which becomes part of a workflow ID.
const MaxTaskIDLen = 200

// MaxPurgeTaskIDs bounds the task_ids of one PurgeActivity call.
const MaxPurgeTaskIDs = 1000

// ValidateSubmit checks a SubmitTaskRequest (§7.1, §9.2): agent_id, a task_id, a priority in
// -19..20, scope metadata (required, and parseable so conflict analysis can use it), and
// params within maxParams bytes (0: no limit).
func ValidateSubmit(req *schedulerpb.SubmitTaskRequest, maxParams int) *protocol.Error {
	if perr := protocol.ValidateAgentID(req.GetAgentId()); perr != nil {
		return perr
	}
	id := req.GetTaskId()
	switch {
	case id == "":
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "task_id is required")
	case len(id) > MaxTaskIDLen || !utf8.ValidString(id) || strings.ContainsFunc(id, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "task_id must be at most %d printable characters without spaces", MaxTaskIDLen)
	}
	if p := req.GetPriority(); p < protocol.MinPriority || p > protocol.MaxPriority {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "priority %d is outside %d (highest) .. %d (lowest); 0 is the default (§7.1)", p, protocol.MinPriority, protocol.MaxPriority)
	}
	if strings.TrimSpace(req.GetScope()) == "" {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "scope is required: describe the resources, repositories or paths the task touches, e.g. \"repo:app path:src/api/**\" (§9.2)")
	}
	if _, err := inference.ParseScope(req.GetScope()); err != nil {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "scope: %v", err)
	}
	if maxParams > 0 && len(req.GetParams()) > maxParams {
		return protocol.Errorf(commonpb.ErrorCode_OVERSIZE_PAYLOAD, "params of %d bytes exceed the %d-byte limit", len(req.GetParams()), maxParams)
	}
	return nil
}

// ParseFlag reads a boolean metadata key given as values: absent, "false" or "0" is false;
// "true" or "1" (in any case) is true; anything else, or the key given twice, is refused.
func ParseFlag(key string, values []string) (bool, *protocol.Error) {
	switch {
	case len(values) == 0:
		return false, nil
	case len(values) > 1:
		return false, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "metadata %s given %d times; give it once", key, len(values))
	}
	switch strings.ToLower(strings.TrimSpace(values[0])) {
	case "false", "0":
		return false, nil
	case "true", "1":
		return true, nil
	}
	return false, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "metadata %s=%q must be true or false", key, values[0])
}

// ValidateShutdown checks a ShutdownAgentRequest (§8.4) and returns its grace period, or def
// when it gives none (or zero).
func ValidateShutdown(req *schedulerpb.ShutdownAgentRequest, def time.Duration) (time.Duration, *protocol.Error) {
	if perr := protocol.ValidateAgentID(req.GetAgentId()); perr != nil {
		return 0, perr
	}
	gp := req.GetGracePeriod()
	if gp == nil {
		return def, nil
	}
	if err := gp.CheckValid(); err != nil {
		return 0, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "grace_period: %v", err)
	}
	switch d := gp.AsDuration(); {
	case d < 0:
		return 0, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "grace_period must not be negative, got %s", d)
	case d > 0:
		return d, nil
	}
	return def, nil
}

// ValidatePurge checks a PurgeActivityRequest (§10): agent_id and 1..MaxPurgeTaskIDs task_ids.
func ValidatePurge(req *schedulerpb.PurgeActivityRequest) *protocol.Error {
	switch n := len(req.GetTaskIds()); {
	case req.GetAgentId() == "":
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "agent_id is required")
	case n == 0:
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "name at least one task_id to purge")
	case n > MaxPurgeTaskIDs:
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "at most %d task_ids per call, got %d", MaxPurgeTaskIDs, n)
	}
	return nil
}
