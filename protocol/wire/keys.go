// Package wire declares every SW4RM key that travels beside the canonical messages: gRPC
// request metadata, response headers and trailers, the content_type parameters of request and
// response linkage, and the map keys the canonical messages' own metadata fields carry. The
// canonical messages must not change (§5.1), so what they have no field for rides on these
// keys; declaring them in one place keeps the frontend, the workflows, the router and the SDK
// agreeing on their spelling, and a test holds them equal to the keys the docs list.
//
// Names say where a key travels: ...Key is request metadata (or a map key of a message's
// metadata field), ...Header a response header, ...Trailer a response trailer, ...Param a
// content_type parameter.
package wire

// Errors (docs/architecture.md, "Errors"; §18.3 for tools).
const (
	// ErrorCodeTrailer is the response trailer that carries the spec's error_code (enum name)
	// whenever a call is rejected, so clients need not parse the reason text.
	ErrorCodeTrailer = "sw4rm-error-code"
	// ToolErrorCodeTrailer is a failed tool call's exact §18.3 error_code (the ToolError detail
	// carries it too); ErrorCodeTrailer carries the nearest common ErrorCode.
	ToolErrorCodeTrailer = "sw4rm-tool-error-code"
	// WorkflowErrorCodeTrailer is a workflow refusal's exact §17.7 error_code where the spec
	// names one that ErrorCode lacks: "workflow_cycle_detected" (ErrorCodeTrailer carries
	// VALIDATION_ERROR beside it, and an ErrorInfo detail lists the cycle's nodes).
	WorkflowErrorCodeTrailer = "sw4rm-workflow-error-code"
)

// Signed calls (§23, docs/signing.md): the request metadata of an agent's signed call.
const (
	// SignatureAgentKey is the agent the call is made as.
	SignatureAgentKey = "sw4rm-agent"
	// SignatureTimestampKey is when the call was signed, in Unix milliseconds (decimal).
	SignatureTimestampKey = "sw4rm-timestamp"
	// SignatureNonceKey is a value the agent never uses twice: 16 to 64 characters of
	// A–Z, a–z, 0–9, '-' and '_'.
	SignatureNonceKey = "sw4rm-nonce"
	// SignatureKey is the Ed25519 signature of the pre-image, base64url without padding.
	SignatureKey = "sw4rm-signature"
)

// ClientKey names the program an operator's call comes from; the sw4rm CLI sets it to
// ClientCLI, and the operator services record it as the door an audited action came through
// (docs/hitl.md, "Operator CLI").
const ClientKey = "sw4rm-client"

// ClientCLI is ClientKey's value on calls made by the sw4rm CLI.
const ClientCLI = "cli"

// ClientConsole is ClientKey's value on calls made by the operator console (the door "web").
const ClientConsole = "web"

// Messaging (§5.5, §12, docs/architecture.md "Addressing", docs/messaging.md).
const (
	// RecipientKey is the SendMessage request metadata naming the recipient agent (§12
	// unicast; the canonical Envelope has no recipient field).
	RecipientKey = "sw4rm-recipient"
	// ResumeAfterKey resumes a stream after a position the caller already processed: on
	// StreamIncoming it is the seq of the last delivery processed (§5.5), and every
	// unconfirmed delivery up to it is confirmed; on ToolService.CallStream it is the last
	// frame_no received of a call already made, the same call_id (§18.2).
	ResumeAfterKey = "sw4rm-resume-after"
	// AckEnumsKey is the StreamIncoming request metadata choosing how the ACKs delivered on
	// the stream write ack_stage and error_code: "names" or "numbers" (protocol.AckEnums).
	// Without it the server answers in the dialect of the agent's own ACKs, else in numbers
	// to the gRPC libraries of the published JS and Python SDKs, else in names.
	AckEnumsKey = "sw4rm-ack-enums"
	// ResponseTimeoutParam is the content_type parameter marking a request that requires a
	// response within this many milliseconds (004 draft §1).
	ResponseTimeoutParam = "sw4rm-response-timeout-ms"
	// MaxAttemptsParam is the content_type parameter bounding the attempts of a
	// response-required request (004 draft §3).
	MaxAttemptsParam = "sw4rm-max-attempts"
	// InResponseToParam is the content_type parameter naming the request a response answers
	// (004 draft §2).
	InResponseToParam = "sw4rm-in-response-to"
	// TraceItemsKey set to "true" on StreamIncoming asks for each delivered envelope's trace
	// context in its content_type (TraceParentParam), so that an agent in any language can
	// continue the message's trace (§19; docs/observability.md, "Traces").
	TraceItemsKey = "sw4rm-trace-items"
	// TraceParentParam is the content_type parameter of a delivered envelope, on a stream
	// that asked with TraceItemsKey, holding the W3C `traceparent` of its delivery's span:
	// the agent sends it back as `traceparent` metadata on its AckDelivery, its ACKs and its
	// replies. It is never part of what the producer sent.
	TraceParentParam = "sw4rm-traceparent"
	// IdempotencyKey is the request metadata that makes a retried call safe: HitlService.Decide
	// (docs/hitl.md) and the negotiation calls Propose, Counter, Evaluate, Decide and Abort
	// (docs/negotiation.md, "Retrying a call"). A retry with the same key by the same caller
	// is answered with the first attempt's outcome.
	IdempotencyKey = "sw4rm-idempotency-key"
	// CorrelationIDKey names a correlation: on RequestHandoff the correlation whose context is
	// handed off (GetPendingHandoffs answers it as a header, one value per pending request;
	// docs/handoff.md), on a tool call the correlation_id of the envelope reply (default: the
	// call_id; docs/tools.md).
	CorrelationIDKey = "sw4rm-correlation-id"
)

// Scheduler (§9, §10, §16.3, docs/scheduler.md): what SubmitTaskRequest and
// PollActivityBufferRequest have no field for.
const (
	// NeedsWorktreeKey set to "true" on SubmitTask marks a task that needs its agent's
	// worktree (§16.3): it is held WAITING while the agent is UNBOUND or BIND_FAILED.
	NeedsWorktreeKey = "sw4rm-needs-worktree"
	// ActivityRepoKey keeps the activity entries of one repo_id (§10.1).
	ActivityRepoKey = "sw4rm-activity-repo"
	// ActivityWorktreeKey keeps the activity entries of one worktree_id.
	ActivityWorktreeKey = "sw4rm-activity-worktree"
	// ActivityTaskKey keeps the activity entries of one task_id.
	ActivityTaskKey = "sw4rm-activity-task"
	// ActivityHistoryKey set to "true" reads the short history — the recently completed or
	// failed entries, most recent first — instead of the active entries.
	ActivityHistoryKey = "sw4rm-activity-history"
	// ActivityWaitingOnHeader names, for active entries whose agent is WAITING on a response
	// (004 §6), "<task_id>=<waiting_on>", one value each.
	ActivityWaitingOnHeader = "sw4rm-activity-waiting-on"
)

// Tools (§18, docs/tools.md "RPCs").
const (
	// AgentIDKey names the agent a tool call is made for, whose worktree it runs in (§16): an
	// operator's calls, or any call when authentication is off, name it here; an agent's own
	// calls may omit it, and naming another agent is refused.
	AgentIDKey = "sw4rm-agent-id"
	// ToolReplyKey set to "envelope" asks for the call's end also as a TOOL_RESULT or
	// TOOL_ERROR envelope to the calling agent (§18.2), on its message stream.
	ToolReplyKey = "sw4rm-tool-reply"
	// CallIDHeader is the tool call's call_id, assigned when the call had none (§18.2).
	CallIDHeader = "sw4rm-call-id"
	// ToolPolicyNoteHeader says where the effective policy differs from the one asked, e.g.
	// retries dropped for a non-idempotent tool (§18.3).
	ToolPolicyNoteHeader = "sw4rm-tool-policy-note"
)

// Handoff (§17.6, docs/handoff.md).
const (
	// ContextContentTypeKey is the RequestHandoff request metadata carrying the context
	// snapshot's content type (004 item 8; absent means application/json).
	// GetPendingHandoffs answers it as a response header, one value per pending request.
	ContextContentTypeKey = "sw4rm-context-content-type"
	// HandoffStateHeader holds the handoff's state after RequestHandoff, AcceptHandoff or
	// RejectHandoff (e.g. "PENDING"); on GetPendingHandoffs, one value per listed request.
	HandoffStateHeader = "sw4rm-handoff-state"
	// HandoffIncludeAcceptedKey set to "true" on GetPendingHandoffs lists, after the offers
	// waiting for the agent's answer, the handoffs it accepted and has not completed, with
	// their context snapshots: what an agent restarting after a crash needs to carry on
	// (§17.6 "particularly after recovery from failure states").
	HandoffIncludeAcceptedKey = "sw4rm-handoff-include-accepted"
	// HandoffCompleteByHeader is the AcceptHandoff response header holding, in RFC 3339, when
	// the accepted handoff must be completed by before it expires.
	HandoffCompleteByHeader = "sw4rm-handoff-complete-by"
)

// HITL (§15, docs/hitl.md).
const (
	// HITLInvocationIDHeader is the response header that names the HITL invocation a call
	// waits in, sent before it blocks so the caller can point an operator at it: the one
	// HitlService.Decide raised, or the approval a ToolService call at ELEVATED or above, or
	// with network FULL_ACCESS, waits for (§18.5.3, TOOL_PRIVILEGE_ESCALATION).
	HITLInvocationIDHeader = "sw4rm-hitl-invocation-id"
)

// Negotiation open metadata (§17.2, §17.3, ADR-011, docs/negotiation.md "Open metadata"):
// NegotiationOpen carries the canonical fields only.
const (
	// OpenerKey names the agent that opens the negotiation and receives its events (the
	// parent of a debate). A proven agent may name only itself; with SW4RM_AUTH=off it is how
	// an agent says who it is.
	OpenerKey = "sw4rm-opener"
	// PolicyProfileKey names the policy profile to start from (§17.2 profile hint).
	PolicyProfileKey = "sw4rm-policy-profile"
	// AgentPreferencesKey carries a JSON object agent_id → AgentPreferences (protojson field
	// names), clamped to the guardrails (§17.2).
	AgentPreferencesKey = "sw4rm-agent-preferences"
	// NegotiationSchemaKey carries the JSON Schema drafts must satisfy (§17.3).
	NegotiationSchemaKey = "sw4rm-negotiation-schema"
	// NegotiationExamplesKey carries the executable examples: a JSON array of
	// {"name", "instance", "valid"} (§17.3).
	NegotiationExamplesKey = "sw4rm-negotiation-examples"
	// NegotiationModeKey selects "contract" (default) or "debate" (ADR-011).
	NegotiationModeKey = "sw4rm-negotiation-mode"
	// DebateRoundsKey is a debate's number of rounds, 0..5 (0: the plain parallel vote).
	DebateRoundsKey = "sw4rm-debate-rounds"
	// DebateStrategyKey is a debate's voting strategy name.
	DebateStrategyKey = "sw4rm-debate-strategy"
	// DebateSummaryBytesKey is the size above which a debate's transcript is summarized.
	DebateSummaryBytesKey = "sw4rm-debate-summary-bytes"
)

// Workflows (§17.7, docs/dag.md). The vocabulary of a definition's own metadata (late_binding,
// schedule, skip_if, event) belongs to the DAG rules and lives in protocol/dag.
const (
	// WorkflowVersionHeader is CreateWorkflow's response header holding the version the
	// definition was stored as (decimal; a byte-identical retry answers the existing one).
	WorkflowVersionHeader = "sw4rm-workflow-version"
	// WorkflowWarningsHeader is CreateWorkflow's response header holding what validation
	// warned about (unreachable nodes, agents left to late binding), one value per warning.
	WorkflowWarningsHeader = "sw4rm-workflow-warnings"
	// RunStatusKey is the WorkflowState.metadata key of the run's own status (RUNNING,
	// WAITING, COMPLETED), which the canonical WorkflowState has no field for.
	RunStatusKey = "sw4rm.run_status"
)

// Worktrees (§16, docs/worktrees.md): the response headers of every WorktreeService call
// describe the binding after the call. Values are escaped as Go string literals without their
// quotes (strconv.QuoteToASCII), since gRPC headers carry ASCII only.
const (
	// WorktreeStateHeader is the binding's state.
	WorktreeStateHeader = "sw4rm-worktree-state"
	// WorktreeBranchHeader is the branch of the worktree the agent works in now.
	WorktreeBranchHeader = "sw4rm-worktree-branch"
	// WorktreePathHeader is the directory of the worktree the agent works in now.
	WorktreePathHeader = "sw4rm-worktree-path"
	// WorktreeHomeHeader is the agent's home worktree_id.
	WorktreeHomeHeader = "sw4rm-worktree-home"
	// WorktreeTargetHeader is the target of a pending or approved switch.
	WorktreeTargetHeader = "sw4rm-worktree-target"
	// WorktreeTTLRemainingHeader is how many milliseconds a BOUND_NON_HOME binding has left
	// before it returns home.
	WorktreeTTLRemainingHeader = "sw4rm-worktree-ttl-remaining-ms"
	// WorktreeExpiresHeader is when a BOUND_NON_HOME binding returns home (RFC 3339).
	WorktreeExpiresHeader = "sw4rm-worktree-expires-at"
	// WorktreeReasonHeader is the §16.3 reason of the last failed bind while BIND_FAILED
	// (and of a failed ApproveSwitch).
	WorktreeReasonHeader = "sw4rm-worktree-reason"
	// WorktreeAttemptsHeader counts the failed binds since the binding entered BIND_FAILED.
	WorktreeAttemptsHeader = "sw4rm-worktree-attempts"
	// WorktreeRetriesHeader counts the automatic retries made of the bind retry budget.
	WorktreeRetriesHeader = "sw4rm-worktree-retries"
	// WorktreeHITLHeader is the HITL invocation (hitl/<id>) deciding a pending switch.
	WorktreeHITLHeader = "sw4rm-worktree-hitl"
	// WorktreeNoteHeader says what the last change was about.
	WorktreeNoteHeader = "sw4rm-worktree-note"
)

// HITL unavailability policy of one negotiation or room (§15.4 hitl_unavailable_policy,
// docs/hitl.md "Choosing the fallback"): request metadata of NegotiationService.Open and
// NegotiationRoomService.SubmitProposal, whose canonical messages have no field for it. Without
// HITLUnavailablePolicyKey the deployment's SW4RM_HITL_UNAVAILABLE_POLICY applies, and the
// other keys are refused.
const (
	// HITLUnavailablePolicyKey is the fallback policy: DENY_BY_DEFAULT, AUTO_DECIDE_THRESHOLD
	// or EXTEND_TIMEOUT.
	HITLUnavailablePolicyKey = "sw4rm-hitl-unavailable-policy"
	// HITLAutoThresholdKey is AUTO_DECIDE_THRESHOLD's auto-approve threshold in (0, 1], which
	// it requires.
	HITLAutoThresholdKey = "sw4rm-hitl-auto-threshold"
	// HITLMaxExtensionsKey is EXTEND_TIMEOUT's maximum number of extensions, 1 to 3 (default 3).
	HITLMaxExtensionsKey = "sw4rm-hitl-max-extensions"
	// HITLExtendByKey is EXTEND_TIMEOUT's extension as a Go duration such as "30s" (default:
	// the wait's own timeout).
	HITLExtendByKey = "sw4rm-hitl-extend-by"
)
