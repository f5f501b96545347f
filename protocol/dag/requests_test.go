package dag

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
)

func TestValidateCreateAndIDs(t *testing.T) {
	_, err := ValidateCreate(nil)
	assert.ErrorContains(t, err, "definition is required")
	assert.NotNil(t, ValidateRunID(""))
	assert.Nil(t, ValidateRunID("wf"))
	assert.Nil(t, ValidateDefinitionVersion("wf", 0))
	assert.Contains(t, ValidateDefinitionVersion("wf", -1).Msg, "version must be 0")
	assert.Contains(t, ValidateDefinitionVersion("", 1).Msg, "workflow_id is required")
}

func TestDataObject(t *testing.T) {
	d, perr := DataObject(" ")
	require.Nil(t, perr)
	assert.Equal(t, "{}", d)
	d, perr = DataObject(`{"a":1}`)
	require.Nil(t, perr)
	assert.Equal(t, `{"a":1}`, d)
	for _, bad := range []string{`[1]`, `null`, `{`} {
		_, perr = DataObject(bad)
		assert.NotNil(t, perr, bad)
	}
}

func TestValidateResume(t *testing.T) {
	req := func(node, data string) *workflowpb.ResumeWorkflowRequest {
		return &workflowpb.ResumeWorkflowRequest{WorkflowId: "wf", NodeId: node, WorkflowData: data}
	}
	k, _, perr := ValidateResume(req("", ""), "", "go")
	require.Nil(t, perr)
	assert.Equal(t, ResumeEvent, k)
	k, _, perr = ValidateResume(req("n", ""), ResumeTrigger, "")
	require.Nil(t, perr)
	assert.Equal(t, ResumeTriggerNode, k)
	_, _, perr = ValidateResume(req("", ""), ResumeTrigger, "")
	assert.Contains(t, perr.Msg, "to trigger a MANUAL node")
	_, _, perr = ValidateResume(req("n", ""), "jump", "")
	assert.Contains(t, perr.Msg, `the only action is "trigger"`)
	_, _, perr = ValidateResume(req("", ""), "", "")
	assert.Contains(t, perr.Msg, "node_id is required")
	k, data, perr := ValidateResume(req("n", `{"x":1}`), "", "")
	require.Nil(t, perr)
	assert.Equal(t, ResumeNode, k)
	assert.Equal(t, `{"x":1}`, data)
	_, _, perr = ValidateResume(req("n", `[]`), "", "")
	assert.NotNil(t, perr)
	_, _, perr = ValidateResume(&workflowpb.ResumeWorkflowRequest{}, "", "")
	assert.Contains(t, perr.Msg, "workflow_id is required")
}
