package loadgen

import (
	"context"
	"fmt"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/sdk"
)

// agent dials and registers the agent <prefix>-<role>, retrying until it is registered and
// RUNNABLE or ctx ends; Run closes it at the end.
func (r *runner) agent(ctx context.Context, role string, d *registrypb.AgentDescriptor) (*sdk.Agent, error) {
	id := r.cfg.AgentPrefix + "-" + role
	a, err := sdk.Dial(r.cfg.Addr, id, r.cfg.DialOptions...)
	if err != nil {
		return nil, err
	}
	r.onClose(func() { _ = a.Close() })
	if d == nil {
		d = &registrypb.AgentDescriptor{}
	}
	if d.Name == "" {
		d.Name = "loadgen-" + role
	}
	d.Description = "load generator agent (" + role + ")"
	if len(d.ModalitiesSupported) == 0 {
		d.ModalitiesSupported = []string{"application/json"}
	}
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err = a.Register(actx, d)
		if err == nil {
			err = a.Heartbeat(actx, commonpb.AgentState_RUNNABLE, map[string]string{"loadgen": "yes"})
		}
		cancel()
		if err == nil {
			r.heartbeat(ctx, a)
			return a, nil
		}
		if code := sdk.CodeOf(err); code != commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED {
			return nil, fmt.Errorf("register %s: %w", id, err)
		}
		r.logf("loadgen: register %s: %v (retrying)", id, err)
		if !sleep(ctx, backoff(attempt)) {
			return nil, fmt.Errorf("register %s: %w", id, err)
		}
	}
}

// DefaultHeartbeatEvery is Config.HeartbeatEvery's default: a third of the server's default
// SW4RM_HEARTBEAT_INTERVAL, so that an agent which only polls (a handoff target) or only
// sends is not stopped after three missed intervals (§14), and a heartbeat lost to a fault
// is made up long before.
const DefaultHeartbeatEvery = 10 * time.Second

// heartbeat sends a's liveness every Config.HeartbeatEvery until ctx ends. The state is left
// unspecified, liveness only: an agent serving tasks reports its own state (sdk.Serve).
func (r *runner) heartbeat(ctx context.Context, a *sdk.Agent) {
	r.background(func() {
		for sleep(ctx, r.cfg.HeartbeatEvery) {
			hctx, cancel := context.WithTimeout(ctx, attemptTimeout)
			if err := a.Heartbeat(hctx, commonpb.AgentState_AGENT_STATE_UNSPECIFIED, nil); err != nil && ctx.Err() == nil {
				r.logf("loadgen: %s: heartbeat: %v", a.ID(), err)
			}
			cancel()
		}
	})
}

// read reads the agent's inbound stream until ctx ends, confirming every delivery:
// onDelivery (nil: none) sees each delivery before its confirmation, onConfirmed (nil: none)
// each whose confirmation the server recorded. A broken stream is opened again with a
// backoff; the server delivers what was not confirmed first. A delivery whose confirmation
// failed ends the stream, so that it comes back at once rather than after its lease.
func (r *runner) read(ctx context.Context, a *sdk.Agent, onDelivery, onConfirmed func(d *sdk.Delivery)) {
	r.background(func() {
		for attempt := 0; ctx.Err() == nil; attempt++ {
			if r.readStream(ctx, a, onDelivery, onConfirmed) {
				attempt = 0
			}
			if !sleep(ctx, backoff(attempt)) {
				return
			}
		}
	})
}

// readStream reads one stream until it breaks; it reports whether it delivered anything.
func (r *runner) readStream(ctx context.Context, a *sdk.Agent, onDelivery, onConfirmed func(d *sdk.Delivery)) bool {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := a.Receive(sctx)
	if err != nil {
		return false
	}
	defer st.Close()
	got := false
	for {
		d, err := st.Next()
		if err != nil {
			if ctx.Err() == nil {
				r.logf("loadgen: %s: stream: %v (reopening)", a.ID(), err)
			}
			return got
		}
		got = true
		if onDelivery != nil {
			onDelivery(d)
		}
		cctx, ccancel := context.WithTimeout(sctx, attemptTimeout)
		recorded, err := d.Confirm(cctx)
		ccancel()
		if err != nil {
			return got
		}
		if recorded && onConfirmed != nil {
			onConfirmed(d)
		}
	}
}
