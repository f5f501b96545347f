package frontend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"google.golang.org/grpc"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/acl"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// Policy on every call (§6.3, §6.5). authz.go decides whether a principal may call a method
// at all; this file decides what the call may touch: the tool it calls (CallTool, with the
// execution policy it asks) and another principal's work it reads or starts (AccessScope: a
// DAG workflow, a tool call's frames). Each decision is an access.allowed or access.refused
// event of the access log (audit.AccessLog, SW4RM_AUDIT_ACCESS), naming who decided it —
// the ACL's rule, ownership, an operator — so every access decision is logged or, sampled,
// counted.
//
// The order, for a resource:
//  1. An operator may touch anything (the ACL's rules speak of agents).
//  2. The resource's owner may touch it: the principal that created it (a DAG workflow's
//     definitions), the caller of a tool call — and, for reads of a call's frames, the
//     agent that provides the tool.
//  3. Anyone else needs an ACL grant (an allow rule covering the scope) when SW4RM_ACL_FILE
//     is set; its default decides the rest, deny unless the file says allow.
//  4. Without an ACL file nobody else may: a proven agent is isolated from other principals'
//     work. An anonymous caller (authentication off, or optional and unsigned) keeps what it
//     had: it proves no identity to isolate.
//
// A resource nobody owns yet (a new workflow_id) is the ACL's to decide when one is set, and
// open otherwise.

// Audit types and kinds of the decisions made here.
const (
	// AuditAccessAllowed records an allowed tool call or resource access.
	AuditAccessAllowed = "access.allowed"
	// AuditAccessRefused records a refused one.
	AuditAccessRefused = "access.refused"
	// accessKindAuth counts the authorization of methods (auth.*), accessKindAccess the
	// decisions of this file (access.*), in the access log.
	accessKindAuth   = "auth"
	accessKindAccess = "access"
)

// Who decided an access, in the decided_by detail of its audit event.
const (
	decidedByOperator = "operator"
	decidedByOwner    = "owner"
	decidedByProvider = "provider"
	decidedByACL      = "acl"
	decidedByNoACL    = "no_acl"
	decidedByAnon     = "unauthenticated"
)

// accessLog is the log the server's decisions go to; nil (a no-op) without an authenticator.
func (s *Server) accessLog() *audit.AccessLog {
	if s.cfg.Auth == nil {
		return nil
	}
	return s.cfg.Auth.Access()
}

// capabilities are the capabilities agent registered with, for the ACL's capability
// patterns; none when it is not registered.
func (s *Server) capabilities(ctx context.Context, agent string) ([]string, error) {
	if agent == "" || s.cfg.ACL == nil {
		return nil, nil
	}
	rec, err := s.store.Registry().GetAgent(ctx, agent)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return rec.Descriptor.GetCapabilities(), nil
}

// decision is one access decision to log.
type decision struct {
	allowed   bool
	decidedBy string
	// acl is the evaluator's decision when decidedBy is decidedByACL.
	acl    acl.Decision
	reason string
}

// record logs d about principal p (acting for agent, if any) with details.
func (s *Server) record(ctx context.Context, p auth.Principal, agent, correlation string, d decision, details map[string]any) {
	details["decided_by"] = d.decidedBy
	details["reason"] = d.reason
	if method, ok := grpc.Method(ctx); ok {
		details["method"] = method
	}
	if d.decidedBy == decidedByACL {
		details["rule"] = d.acl.Rule
		if name := s.cfg.ACL.RuleName(d.acl); name != "" {
			details["rule_name"] = name
		}
	}
	actor := p.String()
	if p.Anonymous() && agent != "" {
		actor = "agent:" + agent // claimed, not proven: authentication is off or optional
	}
	e := audit.Event{Type: AuditAccessAllowed, Actor: actor, AgentID: agent, CorrelationID: correlation, Details: details}
	if !d.allowed {
		e.Type, e.Level = AuditAccessRefused, slog.LevelWarn
		s.accessLog().Refused(ctx, accessKindAccess, e)
		return
	}
	s.accessLog().Allowed(ctx, accessKindAccess, e)
}

// decideTool decides whether caller c may call toolName of providerID with policy pol
// (§6.3 CallTool, with the rule's max_execution_policy), logs the decision and returns the
// refusal as PERMISSION_DENIED (§18.3), nil when allowed.
//
// This is the one check of the tool path: every call reaches a provider through
// ToolService.Call or CallStream, which decide it here before the call is recorded, and the
// call's workflow is started only from the outbox entry recorded with it — nothing else
// writes one — so a workflow never runs a call that was not decided. A TOOL_CALL envelope an
// agent sends another agent directly is the router's to decide (router/acl.go).
func (s *Server) decideTool(ctx context.Context, c caller, providerID, toolName string, pol tool.Policy) *tool.Error {
	d := decision{allowed: true}
	switch {
	case c.principal.Operator != "":
		d.decidedBy, d.reason = decidedByOperator, "operators are not subject to the ACL"
	case s.cfg.ACL == nil:
		d.decidedBy, d.reason = decidedByNoACL, "no ACL configured (SW4RM_ACL_FILE)"
	default:
		caps, err := s.capabilities(ctx, c.agent)
		if err != nil {
			return tool.Errorf(tool.CodeInternal, "reading the capabilities of %s: %v", c.agent, err)
		}
		d.acl = s.cfg.ACL.Decide(acl.Request{Agent: c.agent, Capabilities: caps, Action: acl.CallTool, Tool: toolName, Provider: providerID,
			NetworkPolicy: string(pol.Network), PrivilegeLevel: pol.Privilege.String()})
		d.allowed, d.decidedBy, d.reason = d.acl.Allowed, decidedByACL, d.acl.Reason
	}
	details := map[string]any{"action": string(acl.CallTool), "provider_id": providerID, "tool_name": toolName,
		"network_policy": string(pol.Network), "privilege_level": pol.Privilege.String()}
	if d.acl.Exceeds {
		details["exceeds_max_execution_policy"] = true
	}
	s.record(ctx, c.principal, c.agent, "", d, details)
	if !d.allowed {
		return tool.Errorf(tool.CodePermissionDenied, "acl: %s", d.reason)
	}
	return nil
}

// resource is another principal's work a call reads or starts.
type resource struct {
	// kind and id name it for people, e.g. "DAG workflow" "build".
	kind, id string
	// scope is its ACL scope (acl.DAGScope, acl.ToolCallScope).
	scope string
	// owners are the principals (auth.Principal.String, or a tool call's recorded caller)
	// that own it; none when nobody does yet.
	owners []string
	// readers are agents that may read it without owning it (a tool call's provider agent).
	readers []string
	// anonymousOpen lets an anonymous caller through (what it had before isolation).
	anonymousOpen bool
}

// decideResource decides whether the caller — principal p, known as self (its
// auth.Principal.String unless the handler records it otherwise) and acting as agent —
// may verb (read, start, …) r, logs the decision, and returns a refusal as
// PERMISSION_DENIED, nil when allowed. See the file's comment for the order.
func (s *Server) decideResource(ctx context.Context, p auth.Principal, self, agent, verb string, r resource) error {
	d := decision{allowed: true}
	switch {
	case p.Operator != "":
		d.decidedBy, d.reason = decidedByOperator, "operators may act on any principal's work"
	case slices.Contains(r.owners, self):
		d.decidedBy, d.reason = decidedByOwner, fmt.Sprintf("%s owns %s %s", self, r.kind, r.id)
	case agent != "" && slices.Contains(r.readers, agent) && verb == "read":
		d.decidedBy, d.reason = decidedByProvider, fmt.Sprintf("agent %s provides the tool of %s %s", agent, r.kind, r.id)
	case p.Anonymous() && r.anonymousOpen:
		d.decidedBy, d.reason = decidedByAnon, "an anonymous caller (authentication "+s.authMode().String()+") is not isolated"
	case s.cfg.ACL != nil && agent != "":
		caps, err := s.capabilities(ctx, agent)
		if err != nil {
			return failed("reading the capabilities of "+agent, err)
		}
		d.acl = s.cfg.ACL.Decide(acl.Request{Agent: agent, Capabilities: caps, Action: acl.AccessScope, Scope: r.scope})
		d.allowed, d.decidedBy, d.reason = d.acl.Allowed, decidedByACL, d.acl.Reason
	case len(r.owners) == 0:
		d.decidedBy, d.reason = decidedByNoACL, fmt.Sprintf("nobody owns %s %s yet and no ACL is configured", r.kind, r.id)
	default:
		d.allowed, d.decidedBy = false, decidedByNoACL
		d.reason = fmt.Sprintf("%s %s is %s's; without an ACL grant of scope %q (SW4RM_ACL_FILE) only its owner or an operator may %s it",
			r.kind, r.id, ownerList(r.owners), r.scope, verb)
	}
	s.record(ctx, p, agent, r.id, d, map[string]any{"action": string(acl.AccessScope), "scope": r.scope, "verb": verb})
	if !d.allowed {
		return protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "%s may not %s %s %s: %s", self, verb, r.kind, r.id, d.reason)
	}
	return nil
}

// authMode is the authentication mode (off without an authenticator).
func (s *Server) authMode() auth.Mode {
	if s.cfg.Auth == nil {
		return auth.Off
	}
	return s.cfg.Auth.Mode()
}

// ownerList names a resource's owners for a refusal.
func ownerList(owners []string) string {
	switch len(owners) {
	case 0:
		return "nobody"
	case 1:
		return owners[0]
	}
	return fmt.Sprintf("%s (and %d more)", owners[0], len(owners)-1)
}

// decideDAG decides whether the caller may verb the DAG workflow id — its definitions and
// runs (§17.7). Its owners are the principals that created a version of its definition.
func (s *Server) decideDAG(ctx context.Context, id, verb string) error {
	recs, err := s.store.Definitions().ListDefinitions(ctx, id)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return failed("definition lookup", err)
	}
	var owners []string
	for _, r := range recs {
		if !slices.Contains(owners, r.CreatedBy) {
			owners = append(owners, r.CreatedBy)
		}
	}
	p := auth.FromContext(ctx)
	return s.decideResource(ctx, p, p.String(), p.Agent, verb,
		resource{kind: "DAG workflow", id: id, scope: acl.DAGScope(id), owners: owners, anonymousOpen: true})
}
