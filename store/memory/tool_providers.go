package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// toolProviderRow is one provider's current descriptor set, keyed by tool_name.
type toolProviderRow struct {
	kind  string
	by    string
	at    time.Time
	tools map[string]*connectorpb.ToolDescriptor
}

// toolProvidersStore implements store.ToolProviders over s.toolProviders, under s.mu.
type toolProvidersStore Store

func (p *toolProvidersStore) s() *Store { return (*Store)(p) }

// ToolProviders implements store.Store.
func (s *Store) ToolProviders() store.ToolProviders { return (*toolProvidersStore)(s) }

// RegisterProvider implements store.ToolProviders: the new set is built and checked in full
// before it replaces the old one, so a refused call changes nothing.
func (p *toolProvidersStore) RegisterProvider(ctx context.Context, providerID, kind string, descriptors []*connectorpb.ToolDescriptor, by string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if providerID == "" {
		return errors.New("memory: register tool provider: provider_id is required")
	}
	tools := make(map[string]*connectorpb.ToolDescriptor, len(descriptors))
	for i, d := range descriptors {
		if d == nil || d.GetToolName() == "" {
			return fmt.Errorf("memory: register tool provider %q: descriptor %d has no tool_name", providerID, i)
		}
		if _, dup := tools[d.GetToolName()]; dup {
			return fmt.Errorf("memory: register tool provider %q: tool %q is given twice", providerID, d.GetToolName())
		}
		tools[d.GetToolName()] = proto.Clone(d).(*connectorpb.ToolDescriptor)
	}
	row := &toolProviderRow{kind: kind, by: by, at: now(), tools: tools}
	s := p.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.toolProviders == nil {
		s.toolProviders = make(map[string]*toolProviderRow)
	}
	s.toolProviders[providerID] = row
	return nil
}

// ListTools implements store.ToolProviders.
func (p *toolProvidersStore) ListTools(ctx context.Context, providerID string) ([]store.ToolRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := p.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []store.ToolRecord{}
	for id, row := range s.toolProviders {
		if providerID != "" && id != providerID {
			continue
		}
		for _, d := range row.tools {
			out = append(out, row.record(id, d))
		}
	}
	// Map order is random: sort by provider, then tool, in byte order like PostgreSQL's
	// COLLATE "C".
	slices.SortFunc(out, func(a, b store.ToolRecord) int {
		if c := strings.Compare(a.ProviderID, b.ProviderID); c != 0 {
			return c
		}
		return strings.Compare(a.Descriptor.GetToolName(), b.Descriptor.GetToolName())
	})
	return out, nil
}

// GetTool implements store.ToolProviders.
func (p *toolProvidersStore) GetTool(ctx context.Context, providerID, toolName string) (store.ToolRecord, error) {
	if err := ctx.Err(); err != nil {
		return store.ToolRecord{}, err
	}
	s := p.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	row, ok := s.toolProviders[providerID]
	if ok {
		if d, ok := row.tools[toolName]; ok {
			return row.record(providerID, d), nil
		}
	}
	return store.ToolRecord{}, fmt.Errorf("memory: tool %q of provider %q: %w", toolName, providerID, store.ErrNotFound)
}

// record is a copy of one of the row's tools as a store.ToolRecord.
func (r *toolProviderRow) record(providerID string, d *connectorpb.ToolDescriptor) store.ToolRecord {
	return store.ToolRecord{
		ProviderID:   providerID,
		Kind:         r.kind,
		Descriptor:   proto.Clone(d).(*connectorpb.ToolDescriptor),
		RegisteredBy: r.by,
		RegisteredAt: r.at,
	}
}
