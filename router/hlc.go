package router

import (
	"crypto/rand"
	"encoding/hex"
	"errors"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/hlc"
)

// The router's Hybrid Logical Clock (§4, §5.2): every envelope it admits carries
// hlc_timestamp, a reading of the process's clock. An envelope a producer stamped is a
// receive event (Clock.Update), so what the router admits orders after what the producer had
// seen; one without is a local event (Clock.Now). The HLC is advisory (§24): no decision of
// the router reads it.

// clockFor is the clock a router stamps with: the configured one, else the audit sink's (so
// that an admission's audit row orders after the envelope it admits), else one of its own.
func clockFor(configured *hlc.Clock, sink *audit.Sink) *hlc.Clock {
	if configured != nil {
		return configured
	}
	if c := sink.Clock(); c != nil {
		return c
	}
	var b [4]byte
	_, _ = rand.Read(b[:])                                           // never fails (crypto/rand)
	c, _ := hlc.NewClock("router-"+hex.EncodeToString(b[:]), nil, 0) // a valid node: cannot fail
	return c
}

// stamp sets env's hlc_timestamp to the router's reading of its admission, merging the one
// the producer sent (validated by protocol.ValidateEnvelope). A producer's timestamp further
// ahead of this process's clock than the skew budget is refused with VALIDATION_ERROR rather
// than dragging every clock forward (hlc.Clock.Update).
func (r *Router) stamp(env *commonpb.Envelope) *protocol.Error {
	if env.GetHlcTimestamp() == "" {
		env.HlcTimestamp = r.clock.Now().String()
		return nil
	}
	remote, err := hlc.Parse(env.GetHlcTimestamp())
	if err == nil {
		var ts hlc.Timestamp
		if ts, err = r.clock.Update(remote); err == nil {
			env.HlcTimestamp = ts.String()
			return nil
		}
	}
	if errors.Is(err, hlc.ErrOffset) {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "hlc_timestamp: %v (§24: the skew budget; omit hlc_timestamp or fix the producer's clock)", err)
	}
	return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "hlc_timestamp: %v (§4)", err)
}

// stampControl stamps the router's own traffic (NACKs, notifications, the scheduler's
// CONTROL messages) when it has no HLC yet; a forwarded ACK keeps the one its admission got.
func (r *Router) stampControl(env *commonpb.Envelope) {
	if env.GetHlcTimestamp() == "" {
		env.HlcTimestamp = r.clock.Now().String()
	}
}

// restamp gives a message the router admits again (a response request's retry, a requeued
// dead letter) a reading of this admission, after the one it had: the earlier one may come
// from another process, whose clock may be ahead, or from before a restart.
func (r *Router) restamp(env *commonpb.Envelope) {
	if prev, err := hlc.Parse(env.GetHlcTimestamp()); err == nil {
		if ts, err := r.clock.Update(prev); err == nil {
			env.HlcTimestamp = ts.String()
			return
		}
	}
	env.HlcTimestamp = r.clock.Now().String()
}
