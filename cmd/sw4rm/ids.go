package main

import (
	"strings"

	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// The Temporal UI names every SW4RM run by its workflow ID, a kind prefix and the id the
// commands take: agent/<agent_id>, dag/<workflow_id>, hitl/<invocation_id>, … (the *WorkflowID
// functions of workflows/). Every id argument and id flag accepts both, so an id copied from
// the UI works as it is.

// idKind is one kind of id a command takes, with the workflow-ID prefixes the Temporal UI
// shows in front of it.
type idKind []string

// The id kinds of the commands. An agent has two per-agent workflows, its lifecycle and its
// worktree binding; either names the agent. (No command takes a negotiation or handoff id
// yet; one that does adds its kind here.)
var (
	agentIDs    = idKind{workflows.AgentWorkflowID(""), workflows.WorktreeWorkflowID("")}
	dagIDs      = idKind{workflows.DAGWorkflowID("")}
	hitlIDs     = idKind{hitl.WorkflowID("")}
	taskIDs     = idKind{workflows.TaskWorkflowID("")}
	toolCallIDs = idKind{tool.WorkflowIDPrefix}
)

// bare is the id an argument names: the argument without the first of the kind's prefixes
// it starts with, or the argument itself. Surrounding spaces, which a copy from a browser
// may bring, are dropped.
func (k idKind) bare(arg string) string {
	arg = strings.TrimSpace(arg)
	for _, p := range k {
		if id, ok := strings.CutPrefix(arg, p); ok {
			return id
		}
	}
	return arg
}
