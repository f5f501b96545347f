package frontend

import (
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowdefpb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	pdag "github.com/sw4rm/sw4rm-temporal/protocol/dag"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

func newWorkflowHarness(t *testing.T, agents ...string) (*workflowService, *definitionService, store.Store) {
	t.Helper()
	st := memory.New()
	t.Cleanup(st.Close)
	for _, id := range agents {
		require.NoError(t, st.Registry().PutAgent(t.Context(), store.AgentRecord{
			Descriptor: &registrypb.AgentDescriptor{AgentId: id, Name: id}, State: commonpb.AgentState_RUNNABLE}))
	}
	log := slog.New(slog.DiscardHandler)
	s := &Server{store: st, sink: audit.New(log, st.Audit()), log: log}
	return &workflowService{s: s}, &definitionService{s: s}, st
}

// wfNode is a node of a test definition.
func wfNode(id, agent string, deps ...string) *workflowpb.WorkflowNode {
	return &workflowpb.WorkflowNode{NodeId: id, AgentId: agent, Dependencies: deps}
}

func wfDef(id string, nodes ...*workflowpb.WorkflowNode) *workflowpb.WorkflowDefinition {
	def := &workflowpb.WorkflowDefinition{WorkflowId: id, Nodes: map[string]*workflowpb.WorkflowNode{}}
	for _, n := range nodes {
		def.Nodes[n.GetNodeId()] = n
	}
	return def
}

// TestCreateWorkflowStoresVersions: a valid definition is stored as version 1 by the proven
// caller and audited; a retry with the same definition (created_at aside) answers version 1
// again without a second audit row; a change is version 2; GetDefinition reads either back.
func TestCreateWorkflowStoresVersions(t *testing.T) {
	w, d, st := newWorkflowHarness(t, "a", "b")
	alice := auth.Principal{Agent: "a", KeyID: "k"}
	def := wfDef("wf", wfNode("n1", "a"), wfNode("n2", "b", "n1"))

	ctx, hs := callCtx(t, alice)
	resp, err := w.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: def})
	require.NoError(t, err)
	assert.Equal(t, &workflowpb.CreateWorkflowResponse{WorkflowId: "wf", Success: true}, resp)
	assert.Equal(t, []string{"1"}, hs.md.Get(wire.WorkflowVersionHeader))
	assert.Empty(t, hs.md.Get(wire.WorkflowWarningsHeader))

	retry := proto.Clone(def).(*workflowpb.WorkflowDefinition)
	retry.CreatedAt = timestamppb.Now() // not part of what is compared
	ctx, hs = callCtx(t, alice)
	_, err = w.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: retry})
	require.NoError(t, err)
	assert.Equal(t, []string{"1"}, hs.md.Get(wire.WorkflowVersionHeader), "a retry answers the stored version")

	changed := proto.Clone(def).(*workflowpb.WorkflowDefinition)
	changed.Nodes["n3"] = wfNode("n3", "a", "n2")
	ctx, hs = callCtx(t, auth.Principal{Operator: "ops"})
	_, err = w.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: changed})
	require.NoError(t, err)
	assert.Equal(t, []string{"2"}, hs.md.Get(wire.WorkflowVersionHeader))

	evs, err := st.Audit().List(t.Context(), store.AuditFilter{TypePrefix: "workflow.definition_created"})
	require.NoError(t, err)
	require.Len(t, evs, 2, "one row per stored version, none for the retry")
	var details map[string]any
	require.NoError(t, json.Unmarshal(evs[0].Details, &details))
	assert.Equal(t, "wf", details["workflow_id"])
	assert.EqualValues(t, 1, details["version"])
	assert.Equal(t, "agent:a", details["principal"])

	got, err := d.GetDefinition(ctx, &workflowdefpb.GetDefinitionRequest{WorkflowId: "wf", Version: 1})
	require.NoError(t, err)
	assert.EqualValues(t, 1, got.GetVersion())
	assert.EqualValues(t, 2, got.GetLatestVersion())
	assert.Equal(t, "agent:a", got.GetCreatedBy())
	assert.Len(t, got.GetDefinition().GetNodes(), 2)
	assert.NotNil(t, got.GetDefinition().GetCreatedAt())
	latest, err := d.GetDefinition(ctx, &workflowdefpb.GetDefinitionRequest{WorkflowId: "wf"})
	require.NoError(t, err)
	assert.EqualValues(t, 2, latest.GetVersion())
	assert.Equal(t, "operator:ops", latest.GetCreatedBy())
	assert.Len(t, latest.GetDefinition().GetNodes(), 3)
}

// TestCreateWorkflowRefusals: nothing is stored for a definition that is refused.
func TestCreateWorkflowRefusals(t *testing.T) {
	w, _, st := newWorkflowHarness(t, "a")
	for name, tc := range map[string]struct {
		def    *workflowpb.WorkflowDefinition
		code   codes.Code
		prefix string
		has    string
	}{
		"no definition": {nil, codes.InvalidArgument, "validation_error: ", "definition is required"},
		"cycle": {wfDef("wf", wfNode("r", "a"), wfNode("x", "a", "r", "z"), wfNode("y", "a", "x"), wfNode("z", "a", "y")),
			codes.InvalidArgument, "workflow_cycle_detected: ", "form a cycle"},
		"unknown dependency": {wfDef("wf", wfNode("x", "a", "ghost")), codes.InvalidArgument, "validation_error: ", "ghost"},
		"unregistered agents": {wfDef("wf", wfNode("x", "a"), wfNode("y", "nobody", "x"), wfNode("z", "stranger", "x")),
			codes.InvalidArgument, "validation_error: ", "not registered: nobody, stranger"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, _ := callCtx(t, auth.Principal{Agent: "a"})
			_, err := w.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: tc.def})
			st := toStatus(ctx, err)
			assert.Equal(t, tc.code, st.Code(), "%v", err)
			assert.Regexp(t, "^"+tc.prefix, st.Message())
			assert.Contains(t, st.Message(), tc.has)
			assert.Equal(t, commonpb.ErrorCode_VALIDATION_ERROR, errorCodeOfStatus(st))
		})
	}
	_, err := st.Definitions().GetDefinition(t.Context(), "wf", 0)
	require.ErrorIs(t, err, store.ErrNotFound, "a refused definition is not stored")
}

// TestCreateWorkflowLateBinding: with metadata late_binding=true unregistered agents are
// accepted and named in a warning.
func TestCreateWorkflowLateBinding(t *testing.T) {
	w, _, _ := newWorkflowHarness(t, "a")
	def := wfDef("wf", wfNode("x", "a"), wfNode("y", "later", "x"))
	def.Metadata = map[string]string{pdag.MetaLateBinding: "true"}
	ctx, hs := callCtx(t, auth.Principal{Agent: "a"})
	_, err := w.CreateWorkflow(ctx, &workflowpb.CreateWorkflowRequest{Definition: def})
	require.NoError(t, err)
	assert.Equal(t, []string{"late binding: agents not registered yet: later"}, hs.md.Get(wire.WorkflowWarningsHeader))
	assert.Equal(t, []string{"1"}, hs.md.Get(wire.WorkflowVersionHeader))
}

// TestGetDefinitionRefusals: bad input and unknown definitions.
func TestGetDefinitionRefusals(t *testing.T) {
	_, d, _ := newWorkflowHarness(t)
	ctx, _ := callCtx(t, auth.Principal{Agent: "a"})
	_, err := d.GetDefinition(ctx, &workflowdefpb.GetDefinitionRequest{})
	assert.Equal(t, codes.InvalidArgument, toStatus(ctx, err).Code())
	_, err = d.GetDefinition(ctx, &workflowdefpb.GetDefinitionRequest{WorkflowId: "wf", Version: -1})
	assert.Equal(t, codes.InvalidArgument, toStatus(ctx, err).Code())
	_, err = d.GetDefinition(ctx, &workflowdefpb.GetDefinitionRequest{WorkflowId: "wf"})
	assert.Equal(t, codes.NotFound, toStatus(ctx, err).Code())
	assert.Contains(t, toStatus(ctx, err).Message(), "no_route: workflow \"wf\" has no definition")
}

func TestListAgentsIsBounded(t *testing.T) {
	many := make([]string, maxListedAgents+3)
	for i := range many {
		many[i] = "x"
	}
	assert.Contains(t, listAgents(many), "and 3 more")
	assert.Equal(t, "a, b", listAgents([]string{"a", "b"}))
}
