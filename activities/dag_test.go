package activities_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

func TestStoreDAGOutputIsIdempotent(t *testing.T) {
	st := memory.New()
	t.Cleanup(st.Close)
	a := &activities.Activities{Store: st}
	in := activities.DAGOutputInput{WorkflowID: "wf", NodeID: "build", Attempt: 2, Content: []byte(`{"big": true}`)}

	ref, err := a.StoreDAGOutput(t.Context(), in)
	require.NoError(t, err)
	assert.Equal(t, "artifact:dag/wf/node-output/build/2", ref)
	// A retry of the activity finds the artifact stored and answers the same reference.
	again, err := a.StoreDAGOutput(t.Context(), in)
	require.NoError(t, err)
	assert.Equal(t, ref, again)

	arts, err := st.Artifacts().ListArtifacts(t.Context(), "dag/wf", activities.ArtifactDAGNodeOutput)
	require.NoError(t, err)
	require.Len(t, arts, 1)
	assert.Equal(t, "build/2", arts[0].Version)
	assert.JSONEq(t, `{"big": true}`, string(arts[0].Content))
}
