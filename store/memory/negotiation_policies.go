package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// policyRow is a stored policy or profile with who set it and when.
type policyRow[T proto.Message] struct {
	value T
	setBy string
	setAt time.Time
}

// negotiationPolicies implements store.NegotiationPolicies over s.basePolicy and
// s.profiles, under s.mu.
type negotiationPolicies Store

func (n *negotiationPolicies) s() *Store { return (*Store)(n) }

// NegotiationPolicies implements store.Store.
func (s *Store) NegotiationPolicies() store.NegotiationPolicies { return (*negotiationPolicies)(s) }

// GetBasePolicy implements store.NegotiationPolicies.
func (n *negotiationPolicies) GetBasePolicy(ctx context.Context) (*policypb.NegotiationPolicy, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := n.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.basePolicy == nil {
		return nil, nil
	}
	return proto.Clone(s.basePolicy.value).(*policypb.NegotiationPolicy), nil
}

// SetBasePolicy implements store.NegotiationPolicies.
func (n *negotiationPolicies) SetBasePolicy(ctx context.Context, p *policypb.NegotiationPolicy, by string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if p == nil {
		return errors.New("memory: set base policy: the policy is nil")
	}
	s := n.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.basePolicy = &policyRow[*policypb.NegotiationPolicy]{value: proto.Clone(p).(*policypb.NegotiationPolicy), setBy: by, setAt: now()}
	return nil
}

// SetProfiles implements store.NegotiationPolicies: the new set is built and checked in
// full before it replaces the old one, so a refused call changes nothing.
func (n *negotiationPolicies) SetProfiles(ctx context.Context, profiles []*policypb.PolicyProfile, by string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	at := now()
	next := make(map[string]policyRow[*policypb.PolicyProfile], len(profiles))
	for i, p := range profiles {
		if p == nil || p.GetName() == "" {
			return fmt.Errorf("memory: set profiles: profile %d has no name", i)
		}
		if _, dup := next[p.GetName()]; dup {
			return fmt.Errorf("memory: set profiles: profile %q is given twice", p.GetName())
		}
		next[p.GetName()] = policyRow[*policypb.PolicyProfile]{value: proto.Clone(p).(*policypb.PolicyProfile), setBy: by, setAt: at}
	}
	s := n.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.profiles = next
	return nil
}

// ListProfiles implements store.NegotiationPolicies.
func (n *negotiationPolicies) ListProfiles(ctx context.Context) ([]*policypb.PolicyProfile, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := n.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.profiles))
	for name := range s.profiles {
		names = append(names, name)
	}
	slices.Sort(names)
	out := make([]*policypb.PolicyProfile, len(names))
	for i, name := range names {
		out[i] = proto.Clone(s.profiles[name].value).(*policypb.PolicyProfile)
	}
	return out, nil
}

// GetProfile implements store.NegotiationPolicies.
func (n *negotiationPolicies) GetProfile(ctx context.Context, name string) (*policypb.PolicyProfile, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := n.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	row, ok := s.profiles[name]
	if !ok {
		return nil, fmt.Errorf("memory: policy profile %q: %w", name, store.ErrNotFound)
	}
	return proto.Clone(row.value).(*policypb.PolicyProfile), nil
}
