package app

import (
	"crypto/ed25519"
	"log/slog"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/frontend"
	"github.com/sw4rm/sw4rm-temporal/protocol/acl"
	"github.com/sw4rm/sw4rm-temporal/reasoning"
	"github.com/sw4rm/sw4rm-temporal/repos"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// This file is the one place where settings are copied into the configurations of the
// packages that use them: the router, the frontend with its authenticator, and the workers'
// activities. A new setting that one of them needs is added to the settings table and copied
// here.

// routerConfig is the router's share of the settings, with the §6.3 ACL (nil for none).
func routerConfig(c Config, policy *acl.Policy) router.Config {
	return router.Config{
		BufferCapacity: c.BufferCapacity, Lease: c.DeliveryLease, MaxPayloadBytes: c.MaxPayloadBytes,
		AckTimeout: c.AckTimeout, MaxRetries: c.MaxRetries, DedupWindow: c.DedupWindow, StreamRetention: c.StreamRetention,
		DLQRetention: c.DLQRetention, AuditRetention: keepForever(c.AuditRetention), MessageRetention: keepForever(c.MessageRetention),
		HandoffRetention: keepForever(c.HandoffRetention), HITLRetention: keepForever(c.HITLRetention),
		ToolCallRetention: keepForever(c.ToolCallRetention), PrivilegedRate: c.PrivilegedRate, PrivilegedBurst: c.PrivilegedBurst, LaneWeights: c.LaneWeights,
		ACL: policy,
	}
}

// keepForever maps a retention setting's 0 ("keep forever") to the router's negative one, zero
// there meaning its default.
func keepForever(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// authConfig is the frontend authenticator's share of the settings.
func authConfig(r Resolved, keys store.Keys, sink *audit.Sink, log *slog.Logger) frontend.AuthConfig {
	return frontend.AuthConfig{Mode: r.Auth, Keys: keys, Operators: r.HITLPolicy,
		Skew: r.AuthClockSkew, KeyOverlap: r.KeyOverlap, Sink: sink, Audit: r.AuditAccess, Log: log}
}

// frontendConfig is the gRPC frontend's share of the settings, with what the process built
// from them: the decision key, the ACL, the authenticator and the reasoning engine.
func frontendConfig(r Resolved, decisionKey ed25519.PrivateKey, policy *acl.Policy, authn *frontend.Authenticator,
	engine reasoning.Engine) frontend.Config {
	return frontend.Config{TaskQueue: r.TaskQueue, AgentInitTimeout: r.AgentInitTimeout,
		HeartbeatInterval: r.HeartbeatInterval, HeartbeatMisses: r.HeartbeatMisses,
		HITLPolicy: r.HITLPolicy, HITLDecisionKey: decisionKey, HITLTimeout: r.HITLTimeout,
		RoomPolicy: r.RoomPolicy, RoomTimeout: r.RoomTimeout, HandoffCompletionTimeout: r.HandoffCompletionTimeout, PreemptTimeout: r.PreemptTimeout, TerminateGrace: r.TerminateGrace,
		AgentHistoryLimit: r.AgentHistoryLimit, SchedulerPolicy: r.AdmissionPolicy, ACL: policy, Auth: authn, Reasoning: engine, ToolPreApproved: r.PreApprovedTools,
		ToolApprovalTimeout: r.ToolApprovalTimeout, StreamKeepAlive: r.StreamKeepAlive}
}

// newActivities are the workers' activities over the process's store, router, sink, Temporal
// client, reasoning engine and repositories, with their share of the settings.
func newActivities(r Resolved, st store.Store, rt *router.Router, sink *audit.Sink, temporal client.Client,
	engine reasoning.Engine, repoManager *repos.Manager) *activities.Activities {
	return &activities.Activities{Store: st, Router: rt, Sink: sink, HITL: r.HITLPolicy, Scheduler: r.AdmissionPolicy,
		Temporal: temporal, Reasoning: engine, Repos: repoManager}
}
