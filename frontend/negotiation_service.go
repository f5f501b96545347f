package frontend

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc/metadata"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/debate"
	"github.com/sw4rm/sw4rm-temporal/protocol/negotiation"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// negotiationService serves sw4rm.negotiation.NegotiationService (§17): each negotiation is
// the workflow negotiation/<negotiation_id>, which the RPCs reach with updates that answer
// synchronously with the negotiation's own refusals.
type negotiationService struct {
	negotiationpb.UnimplementedNegotiationServiceServer
	s *Server
}

// incomingMD flattens the request metadata to its first values.
func incomingMD(ctx context.Context) map[string]string {
	out := map[string]string{}
	md, _ := metadata.FromIncomingContext(ctx)
	for k, v := range md {
		if len(v) > 0 {
			out[k] = v[0]
		}
	}
	return out
}

// Open validates the request, derives the effective policy (§17.2) and starts the
// negotiation's workflow, which broadcasts open and policy. Repeating an Open with the same
// topic and participants by the same opener is answered OK; another Open of a used
// negotiation_id is refused with AlreadyExists.
func (n *negotiationService) Open(ctx context.Context, req *negotiationpb.NegotiationOpen) (*commonpb.Empty, error) {
	timeout, perr := negotiation.ValidateOpen(req)
	if perr != nil {
		return nil, perr
	}
	for _, p := range req.GetParticipants() {
		if err := n.s.registered(ctx, p, "participant %q is not a registered agent; register it first"); err != nil {
			return nil, err
		}
	}
	in, err := n.openInput(ctx, req, timeout, incomingMD(ctx))
	if err != nil {
		return nil, err
	}
	err = start(ctx, n.s.temporal, workflows.NegotiationStartOptions(in.NegotiationID, n.s.cfg.TaskQueue), workflows.Negotiation, in)
	if classify(err) == temporalAlreadyStarted {
		return n.reopened(ctx, in)
	}
	if err != nil {
		return nil, temporalUnavailable("open the negotiation", err)
	}
	n.s.sink.Record(ctx, audit.Event{CorrelationID: in.NegotiationID, Actor: in.Opener, Type: "negotiation.opened",
		Details: map[string]any{"topic": in.Topic, "participants": in.Participants, "intensity": req.GetIntensity().String(), "mode": in.Mode,
			"profile": in.Profile, "debate_timeout": in.DebateTimeout.String(), "policy_notes": in.PolicyNotes,
			"hitl_unavailable_policy": in.HITLFallback}})
	return &commonpb.Empty{}, nil
}

// registered refuses with no_route (notFound, formatted with the agent id) an agent that is
// not registered.
func (s *Server) registered(ctx context.Context, agent, notFound string) error {
	if _, err := s.router.Agent(ctx, agent); errors.Is(err, store.ErrNotFound) {
		return protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, notFound, agent)
	} else if err != nil {
		return failed("registry lookup", err)
	}
	return nil
}

// openInput is the negotiation workflow's input for a validated Open with metadata md: the
// mode and drafts' validation, the effective policy and the opener.
func (n *negotiationService) openInput(ctx context.Context, req *negotiationpb.NegotiationOpen, timeout time.Duration, md map[string]string) (workflows.NegotiationInput, error) {
	in := workflows.NegotiationInput{NegotiationID: req.GetNegotiationId(), Topic: req.GetTopic(), Participants: req.GetParticipants(), Intensity: req.GetIntensity()}
	if err := openSetup(md, &in); err != nil {
		return in, err
	}
	if err := n.policy(ctx, req, timeout, md, &in); err != nil {
		return in, err
	}
	return in, n.opener(ctx, md[wire.OpenerKey], &in)
}

// openSetup reads the drafts' schema and examples (§17.3), the mode (ADR-011) and the
// negotiation's own hitl_unavailable_policy (§15.4) from md.
func openSetup(md map[string]string, in *workflows.NegotiationInput) error {
	if s, e := md[wire.NegotiationSchemaKey], md[wire.NegotiationExamplesKey]; s != "" || e != "" {
		if _, err := negotiation.ParseConfig([]byte(s), []byte(e)); err != nil {
			return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s / %s: %v", wire.NegotiationSchemaKey, wire.NegotiationExamplesKey, err)
		}
		if s != "" {
			in.Schema = json.RawMessage(s)
		}
		if e != "" {
			in.Examples = json.RawMessage(e)
		}
	}
	switch mode := md[wire.NegotiationModeKey]; mode {
	case "", workflows.NegotiationModeContract:
		in.Mode = workflows.NegotiationModeContract
	case workflows.NegotiationModeDebate:
		opts, err := debate.ParseOptions(md)
		if err != nil {
			return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "debate options: %v", err)
		}
		in.Mode, in.Debate = workflows.NegotiationModeDebate, opts
	default:
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s %q: want contract or debate", wire.NegotiationModeKey, mode)
	}
	fb, err := hitlFallbackOf(md)
	if err != nil {
		return err
	}
	in.HITLFallback = fb
	return nil
}

// policy derives the effective policy (§17.2) from the stored base policy, the profile md
// names and the participants' preferences.
func (n *negotiationService) policy(ctx context.Context, req *negotiationpb.NegotiationOpen, timeout time.Duration, md map[string]string, in *workflows.NegotiationInput) error {
	derive := negotiation.DeriveInput{Intensity: req.GetIntensity(), DebateTimeout: timeout}
	base, err := n.s.store.NegotiationPolicies().GetBasePolicy(ctx)
	if err != nil {
		return failed("base policy lookup", err)
	}
	derive.Base = base
	if name := md[wire.PolicyProfileKey]; name != "" {
		prof, err := n.s.store.NegotiationPolicies().GetProfile(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s: no policy profile %q (SchedulerPolicyService.ListPolicyProfiles lists them)", wire.PolicyProfileKey, name)
		}
		if err != nil {
			return failed("policy profile lookup", err)
		}
		derive.Profile, in.Profile = prof, name
	}
	if raw := md[wire.AgentPreferencesKey]; raw != "" {
		prefs, perr := negotiation.ParseOpenPreferences(raw, in.Participants)
		if perr != nil {
			return perr
		}
		derive.Preferences = prefs
	}
	d, err := negotiation.Derive(derive)
	if err != nil {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "policy: %v", err)
	}
	in.Effective, in.PolicyNotes, in.DebateTimeout = d.Effective, d.Notes, d.DebateTimeout
	return nil
}

// opener records who opens the negotiation: the proven caller, or the registered agent
// claimed (the sw4rm-opener metadata), which a proven agent may set to itself only.
func (n *negotiationService) opener(ctx context.Context, claimed string, in *workflows.NegotiationInput) error {
	p := auth.FromContext(ctx)
	in.Opener, in.OpenerAgent = p.String(), p.Agent
	if claimed == "" {
		return nil
	}
	if perr := protocol.ValidateAgentID(claimed); perr != nil {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s: %s", wire.OpenerKey, perr.Msg)
	}
	if p.Agent != "" && claimed != p.Agent {
		return protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "%s %q is not the calling agent %q", wire.OpenerKey, claimed, p.Agent)
	}
	if err := n.s.registered(ctx, claimed, wire.OpenerKey+" %q is not a registered agent"); err != nil {
		return err
	}
	in.OpenerAgent = claimed
	if p.Anonymous() {
		in.Opener = "agent:" + claimed // claimed, not proven: SW4RM_AUTH=off trusts the caller
	}
	return nil
}

// reopened answers an Open of a negotiation_id in use: OK for the same opener, topic and
// participants (a retried Open), AlreadyExists otherwise.
func (n *negotiationService) reopened(ctx context.Context, in workflows.NegotiationInput) (*commonpb.Empty, error) {
	st, err := n.state(ctx, in.NegotiationID)
	if err != nil {
		return nil, err
	}
	if st.Opener == in.Opener && st.Topic == in.Topic && slices.Equal(st.Participants, in.Participants) {
		return &commonpb.Empty{}, nil
	}
	return nil, protocol.Errorf(commonpb.ErrorCode_DUPLICATE_DETECTED, "negotiation %q exists (topic %q, opened by %s); choose a new negotiation_id", in.NegotiationID, st.Topic, st.Opener)
}

// Propose submits the first draft (§17): from a participant, in turn, valid (§17.3).
func (n *negotiationService) Propose(ctx context.Context, req *negotiationpb.Proposal) (*commonpb.Empty, error) {
	return n.draft(ctx, req.GetNegotiationId(), req.GetFromAgent(), req.GetContentType(), req.GetPayload(), false)
}

// Counter submits a counter-proposal: the next version, from the participant whose turn it is.
func (n *negotiationService) Counter(ctx context.Context, req *negotiationpb.CounterProposal) (*commonpb.Empty, error) {
	return n.draft(ctx, req.GetNegotiationId(), req.GetFromAgent(), req.GetContentType(), req.GetPayload(), true)
}

func (n *negotiationService) draft(ctx context.Context, id, from, ct string, payload []byte, counter bool) (*commonpb.Empty, error) {
	if perr := negotiation.ValidateDraft(id, from, ct, payload, n.s.router.Config().MaxPayloadBytes); perr != nil {
		return nil, perr
	}
	_, err := negotiationUpdate[int](ctx, n.s, id, workflows.NegotiationDraftUpdate, workflows.NegotiationDraft{From: from, Counter: counter, ContentType: ct, Payload: payload})
	return answerEmpty(err)
}

// answerEmpty answers a call whose only outcome is err.
func answerEmpty(err error) (*commonpb.Empty, error) {
	if err != nil {
		return nil, err
	}
	return &commonpb.Empty{}, nil
}

// Evaluate records a participant's confidence in the current version (§17.3).
func (n *negotiationService) Evaluate(ctx context.Context, req *negotiationpb.Evaluation) (*commonpb.Empty, error) {
	if perr := negotiation.ValidateEvaluation(req); perr != nil {
		return nil, perr
	}
	_, err := negotiationUpdate[int](ctx, n.s, req.GetNegotiationId(), workflows.NegotiationEvaluateUpdate,
		workflows.NegotiationEvaluation{From: req.GetFromAgent(), Confidence: req.GetConfidenceScore(), Notes: req.GetNotes()})
	return answerEmpty(err)
}

// Decide records a result: the opener's (the parent that synthesises a debate) or an
// operator's. A Decide with an empty result decides the latest version.
func (n *negotiationService) Decide(ctx context.Context, req *negotiationpb.Decision) (*commonpb.Empty, error) {
	id := req.GetNegotiationId()
	if perr := negotiation.ValidateID(id); perr != nil {
		return nil, perr
	}
	p := auth.FromContext(ctx)
	if err := n.mayAct(ctx, p, id, false); err != nil {
		return nil, err
	}
	by := req.GetDecidedBy()
	if by == "" {
		by = p.String()
	}
	_, err := negotiationUpdate[string](ctx, n.s, id, workflows.NegotiationDecideUpdate, workflows.NegotiationDecision{By: p.String(), Operator: p.Operator != "", DecidedBy: by,
		ContentType: req.GetContentType(), Result: req.GetResult()})
	return answerEmpty(err)
}

// Abort ends the negotiation: a participant's, the opener's or an operator's call.
func (n *negotiationService) Abort(ctx context.Context, req *negotiationpb.AbortRequest) (*commonpb.Empty, error) {
	id := req.GetNegotiationId()
	if perr := negotiation.ValidateID(id); perr != nil {
		return nil, perr
	}
	p := auth.FromContext(ctx)
	if err := n.mayAct(ctx, p, id, true); err != nil {
		return nil, err
	}
	reason := req.GetReason()
	if reason == "" {
		reason = "aborted by " + p.String()
	}
	_, err := negotiationUpdate[string](ctx, n.s, id, workflows.NegotiationAbortUpdate, workflows.NegotiationAbort{By: p.String(), Operator: p.Operator != "", Reason: reason})
	return answerEmpty(err)
}

// mayAct lets p decide (participants false) or abort (participants true) negotiation id: an
// operator or an anonymous caller (SW4RM_AUTH=off trusts it; the workflow still checks) may,
// as may its opener and, for participants, any participant; anyone else needs an ACL grant
// of negotiation:<id> (decideNegotiation), and each decision is in the access log.
func (n *negotiationService) mayAct(ctx context.Context, p auth.Principal, id string, participants bool) error {
	if p.Anonymous() || p.Operator != "" {
		return nil
	}
	st, err := n.state(ctx, id)
	if err != nil {
		return err
	}
	verb := "decide"
	if participants {
		verb = "abort"
	}
	return n.s.decideNegotiation(ctx, id, verb, st, participants)
}

// state queries the negotiation's workflow, open or closed.
func (n *negotiationService) state(ctx context.Context, id string) (workflows.NegotiationState, error) {
	return negotiationState(ctx, n.s, id)
}

// negotiationState queries negotiation/<id>.
func negotiationState(ctx context.Context, s *Server, id string) (workflows.NegotiationState, error) {
	st, err := query[workflows.NegotiationState](ctx, s.temporal, workflows.NegotiationWorkflowID(id), workflows.NegotiationStateQuery)
	switch {
	case err == nil:
		return st, nil
	case classify(err) == temporalNotFound:
		return st, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "no negotiation %q", id)
	}
	return st, temporalUnavailable("read the negotiation", ctxFirst(ctx, err))
}

// negotiationUpdate sends an update to negotiation/<id> and maps the negotiation's refusals
// onto gRPC codes: permission_denied → PermissionDenied, validation_error → InvalidArgument,
// anything else the workflow refuses, and a closed negotiation, → FailedPrecondition.
func negotiationUpdate[R any](ctx context.Context, s *Server, id, name string, arg any) (R, error) {
	var out R
	key, err := idempotencyKey(ctx)
	if err != nil {
		return out, err
	}
	wid := workflows.NegotiationWorkflowID(id)
	opts := client.UpdateWorkflowOptions{WorkflowID: wid, UpdateName: name, Args: []any{arg}}
	if key != "" {
		// One update id per (caller, key, request): Temporal applies an update id once per
		// run and answers a repeat with the first outcome, even once the run has closed — so
		// a retry of a call whose answer was lost (the frontend died with it) gets that
		// answer instead of being applied again or refused as out of turn.
		if opts.UpdateID, err = negotiationUpdateID(auth.FromContext(ctx).String(), key, name, arg); err != nil {
			return out, failed("derive the update id", err)
		}
	}
	out, err = update[R](ctx, s.temporal, opts)
	class := s.settle(ctx, wid, err)
	// A completing run admits no update; once it has closed, a repeat of an update it
	// applied finds that update's outcome. A keyed call asks again shortly, and once more
	// after the run closed.
	for retried := false; opts.UpdateID != "" && !retried && (class == temporalClosing || class == temporalClosed); {
		if !sleepCtx(ctx, closingRetry) {
			break
		}
		retried = class == temporalClosed
		out, err = update[R](ctx, s.temporal, opts)
		class = s.settle(ctx, wid, err)
	}
	if err == nil {
		return out, nil
	}
	switch class {
	case temporalRefused:
		app := refusalOf(err)
		switch app.Type() {
		case workflows.NegotiationErrPermission:
			return out, protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "%s", app.Message())
		case workflows.NegotiationErrValidation:
			return out, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s", app.Message())
		}
		return out, precondition(commonpb.ErrorCode_VALIDATION_ERROR, "%s", app.Message())
	case temporalNotFound:
		return out, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "no open negotiation %q", id)
	case temporalClosed, temporalClosing:
		return out, precondition(commonpb.ErrorCode_VALIDATION_ERROR, "negotiation %s is closed", id)
	}
	return out, temporalUnavailable(fmt.Sprintf("reach negotiation %s", id), err)
}

// closingRetry is how long a keyed update waits before asking a completing negotiation again.
const closingRetry = 100 * time.Millisecond

// negotiationUpdates is the UUID namespace of update ids derived from idempotency keys.
var negotiationUpdates = uuid.MustParse("9d2b6c41-7e3a-4f08-b5d1-2a8e6f0c4b73")

// negotiationUpdateID derives the update id of a call made with an idempotency key: the
// update's name and a UUIDv5 of the caller, the key and the request. Scoping by the caller
// keeps one caller's key from naming — and so answering — another's call (§23); the request
// makes a key reused for another request another call rather than a replay of the first.
func negotiationUpdateID(caller, key, name string, arg any) (string, error) {
	b, err := json.Marshal(arg)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return name + "/" + uuid.NewSHA1(negotiationUpdates, []byte(caller+"\n"+key+"\n"+hex.EncodeToString(sum[:]))).String(), nil
}
