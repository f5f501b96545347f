package dag

import (
	"encoding/json"
	"strings"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// The checks of WorkflowService and DefinitionService requests that need nothing but the
// request: the frontend runs them before it reads the store or reaches a run.

// ValidateCreate checks a CreateWorkflow's definition: present, and valid (Validate; a
// cycle is a *CycleError).
func ValidateCreate(def *workflowpb.WorkflowDefinition) (Result, error) {
	if def == nil {
		return Result{}, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "definition is required")
	}
	return Validate(def)
}

// ValidateRunID checks the workflow_id of a call about a run.
func ValidateRunID(id string) *protocol.Error {
	if id == "" {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "workflow_id is required")
	}
	return nil
}

// ValidateDefinitionVersion checks a GetDefinition: a workflow_id, and a version that is 0
// (the latest) or positive.
func ValidateDefinitionVersion(id string, version int) *protocol.Error {
	if perr := ValidateRunID(id); perr != nil {
		return perr
	}
	if version < 0 {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "version must be 0 (the latest) or a stored version, not %d", version)
	}
	return nil
}

// DataObject checks workflow_data is a JSON object and returns it ("" is {}).
func DataObject(s string) (string, *protocol.Error) {
	if strings.TrimSpace(s) == "" {
		return "{}", nil
	}
	var obj map[string]json.RawMessage
	// Decoding bytes in memory is deterministic; workflowcheck flags encoding/json only
	// because its reflection reaches runtime internals.
	//workflowcheck:ignore
	if err := json.Unmarshal([]byte(s), &obj); err != nil || obj == nil {
		return "", protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "workflow_data must be a JSON object: %v", err)
	}
	return s, nil
}

// Resume actions, the values of a ResumeWorkflow's metadata "action".
const (
	// ResumeTrigger triggers a MANUAL node.
	ResumeTrigger = "trigger"
)

// ResumeKind is what a ResumeWorkflow asks for.
type ResumeKind int

const (
	// ResumeNode re-runs node_id and its descendants, optionally with new workflow_data.
	ResumeNode ResumeKind = iota
	// ResumeEvent delivers a named event.
	ResumeEvent
	// ResumeTriggerNode triggers a MANUAL node.
	ResumeTriggerNode
)

// ValidateResume checks a ResumeWorkflow with metadata action and event (the values of its
// "action" and "event" keys) and says what it asks for; for ResumeNode it returns the
// workflow_data to apply ("" keeps the run's).
func ValidateResume(req *workflowpb.ResumeWorkflowRequest, action, event string) (ResumeKind, string, *protocol.Error) {
	if perr := ValidateRunID(req.GetWorkflowId()); perr != nil {
		return 0, "", perr
	}
	switch {
	case event != "":
		return ResumeEvent, "", nil
	case action == ResumeTrigger:
		if req.GetNodeId() == "" {
			return 0, "", protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "node_id is required to trigger a MANUAL node")
		}
		return ResumeTriggerNode, "", nil
	case action != "":
		return 0, "", protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "metadata action %q: the only action is \"trigger\"", action)
	}
	if req.GetNodeId() == "" {
		return 0, "", protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "node_id is required: the node to run again with its descendants")
	}
	if req.GetWorkflowData() == "" {
		return ResumeNode, "", nil
	}
	data, perr := DataObject(req.GetWorkflowData())
	return ResumeNode, data, perr
}
