package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// toolProvidersStore implements store.ToolProviders on tool_providers and tool_descriptors
// (migration 00015). Descriptors are stored as protojson with the same options as policies
// (policyJSON, policyUnjson).
type toolProvidersStore Store

func (p *toolProvidersStore) s() *Store { return (*Store)(p) }

// ToolProviders implements store.Store.
func (s *Store) ToolProviders() store.ToolProviders { return (*toolProvidersStore)(s) }

// RegisterProvider implements store.ToolProviders: the provider's row is upserted — which
// locks it until commit, so registrations of one provider take turns — then its
// descriptors are deleted and the new ones inserted, in one transaction.
func (p *toolProvidersStore) RegisterProvider(ctx context.Context, providerID, kind string, descriptors []*connectorpb.ToolDescriptor, by string) error {
	if providerID == "" {
		return errors.New("postgres: register tool provider: provider_id is required")
	}
	// Checked before the transaction, with the memory store's messages; the primary key
	// would refuse a duplicate too, but less readably.
	raws := make([][]byte, len(descriptors))
	seen := make(map[string]bool, len(descriptors))
	for i, d := range descriptors {
		if d == nil || d.GetToolName() == "" {
			return fmt.Errorf("postgres: register tool provider %q: descriptor %d has no tool_name", providerID, i)
		}
		if seen[d.GetToolName()] {
			return fmt.Errorf("postgres: register tool provider %q: tool %q is given twice", providerID, d.GetToolName())
		}
		seen[d.GetToolName()] = true
		raw, err := policyJSON.Marshal(d)
		if err != nil {
			return fmt.Errorf("postgres: register tool provider %q: encode %q: %w", providerID, d.GetToolName(), err)
		}
		raws[i] = raw
	}
	err := pgx.BeginFunc(ctx, p.s().pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO tool_providers (provider_id, kind, registered_by, registered_at)
			VALUES ($1, $2, $3, now())
			ON CONFLICT (provider_id) DO UPDATE SET kind = EXCLUDED.kind,
				registered_by = EXCLUDED.registered_by, registered_at = EXCLUDED.registered_at`,
			providerID, kind, by); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM tool_descriptors WHERE provider_id = $1`, providerID); err != nil {
			return err
		}
		b := &pgx.Batch{}
		for i, d := range descriptors {
			b.Queue(`INSERT INTO tool_descriptors (provider_id, tool_name, descriptor) VALUES ($1, $2, $3)`, providerID, d.GetToolName(), raws[i])
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return fmt.Errorf("postgres: register tool provider %q: %w", providerID, unavailable(err))
	}
	return nil
}

// toolColumns are the columns scanTool reads.
const toolColumns = `d.provider_id, p.kind, d.descriptor, p.registered_by, p.registered_at
	FROM tool_descriptors d JOIN tool_providers p USING (provider_id)`

// ListTools implements store.ToolProviders. COLLATE "C" sorts by bytes, as the memory store
// does, whatever the database's locale.
func (p *toolProvidersStore) ListTools(ctx context.Context, providerID string) ([]store.ToolRecord, error) {
	rows, err := p.s().pool.Query(ctx, `SELECT `+toolColumns+`
		WHERE $1 = '' OR d.provider_id = $1
		ORDER BY d.provider_id COLLATE "C", d.tool_name COLLATE "C"`, providerID)
	if err != nil {
		return nil, fmt.Errorf("postgres: list tools: %w", unavailable(err))
	}
	out, err := pgx.CollectRows(rows, scanTool)
	if err != nil {
		return nil, fmt.Errorf("postgres: list tools: %w", unavailable(err))
	}
	if out == nil {
		out = []store.ToolRecord{}
	}
	return out, nil
}

// GetTool implements store.ToolProviders.
func (p *toolProvidersStore) GetTool(ctx context.Context, providerID, toolName string) (store.ToolRecord, error) {
	rows, err := p.s().pool.Query(ctx, `SELECT `+toolColumns+`
		WHERE d.provider_id = $1 AND d.tool_name = $2`, providerID, toolName)
	if err != nil {
		return store.ToolRecord{}, fmt.Errorf("postgres: tool %q of provider %q: %w", toolName, providerID, unavailable(err))
	}
	r, err := pgx.CollectExactlyOneRow(rows, scanTool)
	if err != nil {
		return store.ToolRecord{}, fmt.Errorf("postgres: tool %q of provider %q: %w", toolName, providerID, unavailable(notFound(err)))
	}
	return r, nil
}

func scanTool(row pgx.CollectableRow) (store.ToolRecord, error) {
	var (
		r   store.ToolRecord
		raw []byte
		at  time.Time
	)
	if err := row.Scan(&r.ProviderID, &r.Kind, &raw, &r.RegisteredBy, &at); err != nil {
		return store.ToolRecord{}, err
	}
	r.Descriptor = &connectorpb.ToolDescriptor{}
	if err := policyUnjson.Unmarshal(raw, r.Descriptor); err != nil {
		return store.ToolRecord{}, fmt.Errorf("decode descriptor: %w", err)
	}
	r.RegisteredAt = at.UTC()
	return r, nil
}
