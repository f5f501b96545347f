package workflows

// The names of the handoff workflow (§17.6) that the frontend and the SDK code against, as
// the handoff design fixes them. workflows/handoff.go, which holds the workflow itself,
// defines the same names; this file holds only these and gives way to it.

import (
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
)

// KindHandoff is the SW4RMKind search-attribute value of handoff runs.
const KindHandoff = "handoff"

// Search attributes of handoff runs.
var (
	// HandoffStateKey is a handoff run's state: PENDING, ACCEPTED, COMPLETED, REJECTED or
	// EXPIRED.
	HandoffStateKey = temporal.NewSearchAttributeKeyKeyword("SW4RMHandoffState")
	// HandoffAgentsKey lists the originator and every agent offered the handoff so far.
	HandoffAgentsKey = temporal.NewSearchAttributeKeyKeywordList("SW4RMHandoffAgents")
)

// Names of the handoff workflow's messages.
const (
	// HandoffAcceptUpdate carries a HandoffAnswer; it returns the HandoffState.
	HandoffAcceptUpdate = "accept"
	// HandoffRejectUpdate carries a HandoffAnswer; it returns the HandoffState.
	HandoffRejectUpdate = "reject"
	// HandoffCompleteUpdate carries a HandoffCompletion; it returns the HandoffState.
	HandoffCompleteUpdate = "complete"
	// HandoffCancelSignal carries a HandoffCancel.
	HandoffCancelSignal = "cancel"
	// HandoffStateQuery returns the HandoffState.
	HandoffStateQuery = "state"
	// HandoffStart starts workflow handoff/<request_id> after the handoff was stored.
	// Payload: HandoffStartHandoff.
	HandoffStart = "handoff.start"
)

// HandoffWorkflowID is the workflow of one handoff: "handoff/<request_id>".
func HandoffWorkflowID(requestID string) string { return "handoff/" + requestID }

// HandoffStartOptions are the start options of workflow handoff/<requestID> on taskQueue.
func HandoffStartOptions(requestID, taskQueue string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       HandoffWorkflowID(requestID),
		TaskQueue:                taskQueue,
		WorkflowIDReusePolicy:    enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy: enums.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			KindKey.ValueSet(KindHandoff),
			HandoffStateKey.ValueSet(handoffpb.HandoffStatus_PENDING.String()),
		),
	}
}

// HandoffBudget is the BudgetEnvelope of a handoff request.
type HandoffBudget struct {
	// CurrentDepth and MaxDepth are the delegation depth and its limit.
	CurrentDepth, MaxDepth uint32
	// TokenBudget, WallTimeMs and DeadlineEpochMs are what is left of the chain's budget.
	TokenBudget, WallTimeMs, DeadlineEpochMs uint64
}

// HandoffPolicy is the SwarmDelegationPolicy of a handoff request.
type HandoffPolicy struct {
	// MaxRetriesOnOverloaded bounds the re-offers after OVERLOADED.
	MaxRetriesOnOverloaded uint32
	// InitialBackoff, Multiplier and MaxBackoff shape the wait before a re-offer.
	InitialBackoff time.Duration
	Multiplier     float64
	MaxBackoff     time.Duration
	// AllowSpillover offers a named target's refusal to the next capable agent.
	AllowSpillover bool
	// MaxRedirects bounds the REDIRECTs followed.
	MaxRedirects uint32
}

// HandoffInput starts a handoff workflow. It never holds the context snapshot: the store does.
type HandoffInput struct {
	RequestID, Correlation, From, To, Reason string
	Capabilities                             []string
	Priority                                 int32
	Timeout                                  time.Duration
	Budget                                   HandoffBudget
	Policy                                   HandoffPolicy
	ContextContentType                       string
	ContextSize                              int
	ContextSHA256                            string
	RequestedAt                              time.Time
}

// HandoffStartHandoff is the payload of a HandoffStart handoff.
type HandoffStartHandoff struct {
	// Input starts the workflow.
	Input HandoffInput
}

// HandoffAnswer is the payload of HandoffAcceptUpdate and HandoffRejectUpdate.
type HandoffAnswer struct {
	// Agent is the answering agent.
	Agent string
	// Reason, Code, RetryAfterMs and RedirectTo describe a rejection.
	Reason       string
	Code         commonpb.ErrorCode
	RetryAfterMs uint64
	RedirectTo   string
}

// HandoffCompletion is the payload of HandoffCompleteUpdate.
type HandoffCompletion struct {
	// Agent is the proven caller, "" when authentication is off.
	Agent string
	// Status is the final status (COMPLETED).
	Status handoffpb.HandoffStatus
}

// HandoffCancel is the payload of HandoffCancelSignal.
type HandoffCancel struct {
	// Reason says why; GracePeriod is the cancellation's grace; By is who cancelled.
	Reason      string
	GracePeriod time.Duration
	By          string
}

// HandoffOffer is one offer a handoff made.
type HandoffOffer struct {
	// Agent was offered the handoff at At, chosen for Reason.
	Agent, Reason string
	At            time.Time
}

// HandoffState is the answer of HandoffStateQuery and of the updates.
type HandoffState struct {
	RequestID, Correlation, From, Target string
	Status                               handoffpb.HandoffStatus
	EndReason                            string
	Offers                               []HandoffOffer
	Refused                              []string
	Redirects, OverloadRetries           int
	AcceptedBy                           string
	UpdatedAt                            time.Time
}
