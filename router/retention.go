package router

import "time"

// The default retentions of the records housekeeping prunes (docs/reliability.md, "Retention").
const (
	// DefaultAuditRetention is how long audit events are kept (§19).
	DefaultAuditRetention = 30 * 24 * time.Hour
	// DefaultMessageRetention is how long a finished message is kept (§11).
	DefaultMessageRetention = 7 * 24 * time.Hour
	// DefaultHandoffRetention is how long ended handoffs and their fences are kept (§17.6).
	DefaultHandoffRetention = 7 * 24 * time.Hour
	// DefaultHITLRetention is how long decided HITL invocations are kept (§15).
	DefaultHITLRetention = 7 * 24 * time.Hour
	// DefaultToolCallRetention is how long ended tool calls and their frames are kept (§18.2).
	DefaultToolCallRetention = 7 * 24 * time.Hour
)
