package negotiation

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
)

func TestValidateSubmitEvaluation(t *testing.T) {
	ok := &schedulerpb.SubmitEvaluationRequest{NegotiationId: "n-1", Report: &policypb.EvaluationReport{FromAgent: "a"}}
	assert.Nil(t, ValidateSubmitEvaluation(ok))
	assert.Equal(t, "validation_error: negotiation_id is required", ValidateSubmitEvaluation(&schedulerpb.SubmitEvaluationRequest{}).Error())
	assert.Equal(t, "validation_error: report is required", ValidateSubmitEvaluation(&schedulerpb.SubmitEvaluationRequest{NegotiationId: "n"}).Error())
	perr := ValidateSubmitEvaluation(&schedulerpb.SubmitEvaluationRequest{NegotiationId: "n", Report: &policypb.EvaluationReport{}})
	if assert.NotNil(t, perr) {
		assert.Contains(t, perr.Error(), "validation_error: report.from_agent: ")
	}
	assert.NotNil(t, ValidateID("a b/c"))
}

func TestHITLActionOf(t *testing.T) {
	for in, want := range map[string]string{" Continue ": "approve", "accept": "approve", "REJECT": "deny", "abort": ActionAbort, "modify": "modify", "x": "x"} {
		assert.Equal(t, want, HITLActionOf(in), in)
	}
}
