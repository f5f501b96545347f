package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// negotiationPolicies implements store.NegotiationPolicies on negotiation_base_policy and
// negotiation_policy_profiles (migration 00013).
type negotiationPolicies Store

func (n *negotiationPolicies) s() *Store { return (*Store)(n) }

// NegotiationPolicies implements store.Store.
func (s *Store) NegotiationPolicies() store.NegotiationPolicies { return (*negotiationPolicies)(s) }

// policyJSON is how policies are stored: protojson with the .proto field names, readable
// with psql; unknown fields are dropped on the way back, so a row a newer version wrote
// still loads.
var (
	policyJSON   = protojson.MarshalOptions{UseProtoNames: true}
	policyUnjson = protojson.UnmarshalOptions{DiscardUnknown: true}
)

// GetBasePolicy implements store.NegotiationPolicies.
func (n *negotiationPolicies) GetBasePolicy(ctx context.Context) (*policypb.NegotiationPolicy, error) {
	var raw []byte
	err := n.s().pool.QueryRow(ctx, `SELECT policy FROM negotiation_base_policy`).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get base policy: %w", unavailable(err))
	}
	p := &policypb.NegotiationPolicy{}
	if err := policyUnjson.Unmarshal(raw, p); err != nil {
		return nil, fmt.Errorf("postgres: get base policy: decode: %w", err)
	}
	return p, nil
}

// SetBasePolicy implements store.NegotiationPolicies.
func (n *negotiationPolicies) SetBasePolicy(ctx context.Context, p *policypb.NegotiationPolicy, by string) error {
	if p == nil {
		return errors.New("postgres: set base policy: the policy is nil")
	}
	raw, err := policyJSON.Marshal(p)
	if err != nil {
		return fmt.Errorf("postgres: set base policy: encode: %w", err)
	}
	_, err = n.s().pool.Exec(ctx, `INSERT INTO negotiation_base_policy (singleton, policy, set_by, set_at)
		VALUES (true, $1, $2, now())
		ON CONFLICT (singleton) DO UPDATE SET policy = EXCLUDED.policy, set_by = EXCLUDED.set_by, set_at = EXCLUDED.set_at`,
		raw, by)
	if err != nil {
		return fmt.Errorf("postgres: set base policy: %w", unavailable(err))
	}
	return nil
}

// SetProfiles implements store.NegotiationPolicies: under the table's lock every profile is
// deleted and the new ones inserted in one transaction, so readers see the old set or the
// new one, never a mix, and a refused call changes nothing.
func (n *negotiationPolicies) SetProfiles(ctx context.Context, profiles []*policypb.PolicyProfile, by string) error {
	// Checked before the transaction, with the memory store's messages; the primary key
	// would refuse a duplicate too, but less readably.
	raws := make([][]byte, len(profiles))
	seen := make(map[string]bool, len(profiles))
	for i, p := range profiles {
		if p == nil || p.GetName() == "" {
			return fmt.Errorf("postgres: set profiles: profile %d has no name", i)
		}
		if seen[p.GetName()] {
			return fmt.Errorf("postgres: set profiles: profile %q is given twice", p.GetName())
		}
		seen[p.GetName()] = true
		raw, err := policyJSON.Marshal(p)
		if err != nil {
			return fmt.Errorf("postgres: set profiles: encode %q: %w", p.GetName(), err)
		}
		raws[i] = raw
	}
	err := pgx.BeginFunc(ctx, n.s().pool, func(tx pgx.Tx) error {
		// Writers take turns: two concurrent replacements would otherwise each delete only
		// the rows committed before them and insert beside the other's, mixing the sets.
		// EXCLUSIVE still lets readers read the committed set.
		if _, err := tx.Exec(ctx, `LOCK TABLE negotiation_policy_profiles IN EXCLUSIVE MODE`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM negotiation_policy_profiles`); err != nil {
			return err
		}
		b := &pgx.Batch{}
		for i, p := range profiles {
			b.Queue(`INSERT INTO negotiation_policy_profiles (name, profile, set_by, set_at) VALUES ($1, $2, $3, now())`, p.GetName(), raws[i], by)
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return fmt.Errorf("postgres: set profiles: %w", unavailable(err))
	}
	return nil
}

// ListProfiles implements store.NegotiationPolicies. COLLATE "C" sorts by bytes, as the
// memory store does, whatever the database's locale.
func (n *negotiationPolicies) ListProfiles(ctx context.Context) ([]*policypb.PolicyProfile, error) {
	rows, err := n.s().pool.Query(ctx, `SELECT profile FROM negotiation_policy_profiles ORDER BY name COLLATE "C"`)
	if err != nil {
		return nil, fmt.Errorf("postgres: list profiles: %w", unavailable(err))
	}
	out, err := pgx.CollectRows(rows, scanProfile)
	if err != nil {
		return nil, fmt.Errorf("postgres: list profiles: %w", unavailable(err))
	}
	if out == nil {
		out = []*policypb.PolicyProfile{}
	}
	return out, nil
}

// GetProfile implements store.NegotiationPolicies.
func (n *negotiationPolicies) GetProfile(ctx context.Context, name string) (*policypb.PolicyProfile, error) {
	rows, err := n.s().pool.Query(ctx, `SELECT profile FROM negotiation_policy_profiles WHERE name = $1`, name)
	if err != nil {
		return nil, fmt.Errorf("postgres: get profile %q: %w", name, unavailable(err))
	}
	p, err := pgx.CollectExactlyOneRow(rows, scanProfile)
	if err != nil {
		return nil, fmt.Errorf("postgres: get profile %q: %w", name, unavailable(notFound(err)))
	}
	return p, nil
}

func scanProfile(row pgx.CollectableRow) (*policypb.PolicyProfile, error) {
	var raw []byte
	if err := row.Scan(&raw); err != nil {
		return nil, err
	}
	p := &policypb.PolicyProfile{}
	if err := policyUnjson.Unmarshal(raw, p); err != nil {
		return nil, fmt.Errorf("decode profile: %w", err)
	}
	return p, nil
}
