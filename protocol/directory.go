package protocol

import (
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/directorypb"
)

// The checks of the extension sw4rmext.directory.v1.DirectoryService: the reads of the
// registry (§14), of one handoff (§17.6) and the listings of tasks (§10), DAG runs (§17.7)
// and tool calls (§18) that the canonical services lack.

// Listing limits of ListTasks, ListDAGRuns and ListToolCalls.
const (
	// DefaultListLimit is how many entries a listing returns when the request sets no limit.
	DefaultListLimit = 100
	// MaxListLimit is the largest limit a listing accepts: one answer stays small.
	MaxListLimit = 1000
)

// Listing states, by the names the listings answer with. A filter must be one of them, so a
// misspelt one is refused rather than matching nothing.
var (
	// TaskStates are the states of an activity buffer entry (§10): active, or how it ended.
	TaskStates = []string{"active", "completed", "failed", "cancelled", "unknown"}
	// DAGRunStates are the states a DAG run records (§17.7; workflows.DAGRunning and its
	// siblings, the SW4RMDAGState search attribute).
	DAGRunStates = []string{"RUNNING", "WAITING", "COMPLETED", "FAILED"}
	// ToolCallStates are the states of a tool call (§18): running, or how its final frame's
	// summary says it ended.
	ToolCallStates = []string{"running", "ok", "error", "cancelled"}
)

// maxFilterText bounds a free-text filter (a task_id or tool_name), in bytes.
const maxFilterText = 256

// ValidateGetAgent checks a GetAgent request: a valid agent_id.
func ValidateGetAgent(req *directorypb.GetAgentRequest) *Error {
	return ValidateAgentID(req.GetAgentId())
}

// ValidateListAgents checks a ListAgents request's filters: a state filter must be the enum
// name of a defined AgentState (§8), so a misspelt one is refused rather than matching
// nothing.
func ValidateListAgents(req *directorypb.ListAgentsRequest) *Error {
	if s := req.GetState(); s != "" {
		if v, ok := commonpb.AgentState_value[s]; !ok || v == 0 {
			return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "state %q is not an AgentState name (e.g. RUNNABLE, WAITING, SUSPENDED)", truncate(s))
		}
	}
	return nil
}

// ValidateGetHandoff checks a GetHandoff request: a request_id of the shape RequestHandoff
// accepts (the agent-id charset, since it names the workflow handoff/<request_id>).
func ValidateGetHandoff(req *directorypb.GetHandoffRequest) *Error {
	switch id := req.GetRequestId(); {
	case id == "":
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "request_id is required")
	case !agentIDPattern.MatchString(id):
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "request_id %q must be 1-128 characters of letters, digits and . _ : @ - starting with a letter or digit", truncate(id))
	}
	return nil
}

// ValidateListTasks checks a ListTasks request's filters: an agent_id of the agent-id shape,
// a known state, a task_id of text, and a limit of at most MaxListLimit.
func ValidateListTasks(req *directorypb.ListTasksRequest) *Error {
	if perr := checkIDFilter("agent_id", req.GetAgentId()); perr != nil {
		return perr
	}
	if perr := checkStateFilter(req.GetState(), TaskStates); perr != nil {
		return perr
	}
	if perr := checkTextFilter("task_id", req.GetTaskId()); perr != nil {
		return perr
	}
	return checkLimit(req.GetLimit())
}

// ValidateListDAGRuns checks a ListDAGRuns request's filters: a workflow_id_prefix that
// starts a workflow id (the agent-id shape, so it also stays a literal in a visibility
// query), a known state, and a limit of at most MaxListLimit.
func ValidateListDAGRuns(req *directorypb.ListDAGRunsRequest) *Error {
	if perr := checkIDFilter("workflow_id_prefix", req.GetWorkflowIdPrefix()); perr != nil {
		return perr
	}
	if perr := checkStateFilter(req.GetState(), DAGRunStates); perr != nil {
		return perr
	}
	return checkLimit(req.GetLimit())
}

// ValidateListToolCalls checks a ListToolCalls request's filters: a caller as calls record
// it ("agent:<agent_id>", "operator:<name>" or "anonymous"), a provider_id of the agent-id
// shape, a tool_name of text, a known state, and a limit of at most MaxListLimit.
func ValidateListToolCalls(req *directorypb.ListToolCallsRequest) *Error {
	if c := req.GetCaller(); c != "" && c != "anonymous" {
		kind, name, _ := strings.Cut(c, ":")
		if (kind != "agent" && kind != "operator") || !agentIDPattern.MatchString(name) {
			return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "caller %q: want agent:<agent_id>, operator:<name> or anonymous", truncate(c))
		}
	}
	if perr := checkIDFilter("provider_id", req.GetProviderId()); perr != nil {
		return perr
	}
	if perr := checkTextFilter("tool_name", req.GetToolName()); perr != nil {
		return perr
	}
	if perr := checkStateFilter(req.GetState(), ToolCallStates); perr != nil {
		return perr
	}
	return checkLimit(req.GetLimit())
}

// checkIDFilter refuses a filter that is set but not of the agent-id shape.
func checkIDFilter(field, v string) *Error {
	if v != "" && !agentIDPattern.MatchString(v) {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s %q must be 1-128 characters of letters, digits and . _ : @ - starting with a letter or digit", field, truncate(v))
	}
	return nil
}

// checkTextFilter refuses a filter that is not valid UTF-8, holds NUL or is too long.
func checkTextFilter(field, v string) *Error {
	if len(v) > maxFilterText || !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s must be valid UTF-8 of at most %d bytes without NUL", field, maxFilterText)
	}
	return nil
}

// checkStateFilter refuses a state filter that is set but not one of the states.
func checkStateFilter(v string, states []string) *Error {
	if v != "" && !slices.Contains(states, v) {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "state %q: want one of %s", truncate(v), strings.Join(states, ", "))
	}
	return nil
}

// checkLimit refuses a limit above MaxListLimit.
func checkLimit(n uint32) *Error {
	if n > MaxListLimit {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "limit %d is more than %d", n, MaxListLimit)
	}
	return nil
}

// ListLimit is a listing's effective limit: the request's, or DefaultListLimit when it sets
// none.
func ListLimit(n uint32) int {
	if n == 0 {
		return DefaultListLimit
	}
	return int(n)
}
