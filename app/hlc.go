package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/sw4rm/sw4rm-temporal/protocol/hlc"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// newClock makes the process's one Hybrid Logical Clock (§4), which the router stamps
// envelopes with and the audit sink stamps rows with, and seeds it with the highest HLC the
// store holds: a process never stamps below what an earlier run, or another process sharing
// the store whose clock runs ahead, has stamped. cfg.PhysicalClock, when set, replaces the
// host's clock (tests skew it). The skew budget is hlc.DefaultMaxOffset.
func newClock(ctx context.Context, cfg Config, st store.Store, log *slog.Logger) (*hlc.Clock, error) {
	clock, err := hlc.NewClock(NodeID(), cfg.PhysicalClock, 0)
	if err != nil {
		return nil, err
	}
	top, err := st.Audit().MaxHLC(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the highest HLC in the store: %w", err)
	}
	if top != "" {
		floor, err := hlc.Parse(top)
		if err != nil {
			// Rows come from this code, so this is a bug or a hand edit: start without a floor.
			log.Warn("the store's highest HLC does not parse; the clock starts without a floor", "hlc", top, "error", err)
		} else {
			clock.Observe(floor)
		}
	}
	log.Info("hybrid logical clock", "node", clock.Node(), "floor", top, "max_offset", clock.MaxOffset())
	return clock, nil
}

// NodeID is the node identifier of this process's HLC: the host name's first label (only
// the characters hlc.ValidNode allows, at most 32 of them) and a random suffix of 8 hex
// digits, e.g. "web-3-9f2c61d0". The suffix tells apart processes on one host, and the runs
// of one process: two clocks must never stamp as the same node.
func NodeID() string {
	host, _ := os.Hostname()
	host, _, _ = strings.Cut(host, ".")
	var b strings.Builder
	for _, c := range []byte(host) {
		if b.Len() == 32 {
			break
		}
		if hlc.ValidNode(string(c)) == nil {
			b.WriteByte(c)
		}
	}
	if b.Len() == 0 {
		b.WriteString("sw4rm")
	}
	var r [4]byte
	_, _ = rand.Read(r[:]) // never fails (crypto/rand)
	return b.String() + "-" + hex.EncodeToString(r[:])
}
