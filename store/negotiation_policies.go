package store

import (
	"context"

	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
)

// NegotiationPolicies stores the scheduler's negotiation policy (§17.2: "The Scheduler is
// the source of truth for negotiation policy"): the base NegotiationPolicy that
// SetNegotiationPolicy sets and every negotiation's EffectivePolicy starts from, and the
// named profiles that SetPolicyProfiles sets and a negotiation's profile hint selects. Each
// write records who made it and when. Values go in and come out as copies: changing a
// message after Set, or one that Get returned, changes nothing stored.
//
// The store keeps what it is given: the frontend validates policies (§17.2's ranges, profile
// names) before it writes them. The store itself refuses only what it cannot keep: a nil
// policy, and profiles without a name or with one name twice.
type NegotiationPolicies interface {
	// GetBasePolicy returns the base policy, nil when never set.
	GetBasePolicy(ctx context.Context) (*policypb.NegotiationPolicy, error)
	// SetBasePolicy replaces the base policy; by is the principal that set it.
	SetBasePolicy(ctx context.Context, p *policypb.NegotiationPolicy, by string) error
	// SetProfiles replaces every profile at once (atomic): afterwards exactly these exist,
	// and a refused call changes nothing. An empty list removes every profile.
	SetProfiles(ctx context.Context, profiles []*policypb.PolicyProfile, by string) error
	// ListProfiles returns the profiles sorted by name (byte order); none is an empty slice.
	ListProfiles(ctx context.Context) ([]*policypb.PolicyProfile, error)
	// GetProfile returns one profile or ErrNotFound.
	GetProfile(ctx context.Context, name string) (*policypb.PolicyProfile, error)
}
