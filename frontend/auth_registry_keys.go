package frontend

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// keyHandshake is the identity half of RegisterAgent (§6.2: keys are distributed through the
// registry handshake). It runs after the descriptor is validated and before the record is
// written:
//
//   - An agent_id that holds no valid key is claimed by the first registration that brings a
//     public_key; in optional and required mode the call was signed with that very key, so
//     the caller proved it holds it. Two concurrent claims cannot both win (store.Keys).
//   - An agent_id that holds a valid key is re-registered only by a call signed with one of
//     its valid keys, or by an operator: registering again cannot take an identity over.
//   - A re-registration that brings a new public_key rotates: the new key is added and every
//     other key stays valid for the overlap window, then expires (§23).
//
// Keys outlive deregistration: an agent_id stays its holder's until an operator revokes its
// keys (`sw4rm keys revoke`). In off mode the first key is recorded and nothing is enforced.
func (s *Server) keyHandshake(ctx context.Context, d *registrypb.AgentDescriptor) error {
	pub, alg := d.GetPublicKey(), ""
	if len(pub) != 0 {
		var err error
		if alg, err = auth.KeyAlgorithm(pub); err != nil {
			return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "agent.%v", err)
		}
	}
	mode, overlap := auth.Off, DefaultKeyOverlap
	if s.cfg.Auth != nil {
		mode, overlap = s.cfg.Auth.cfg.Mode, s.cfg.Auth.cfg.KeyOverlap
	}
	id, now := d.GetAgentId(), time.Now()
	keys, err := s.store.Keys().ListAgentKeys(ctx, id)
	if err != nil {
		return failed("key lookup", err)
	}
	valid := slices.DeleteFunc(slices.Clone(keys), func(k store.AgentKey) bool { return !k.ValidAt(now) })
	var newKey store.AgentKey
	if len(pub) > 0 {
		newKey = store.AgentKey{AgentID: id, KeyID: auth.KeyID(alg, pub), Algorithm: alg, PublicKey: pub, AddedAt: now.UTC()}
	}
	known := len(pub) > 0 && slices.ContainsFunc(valid, func(k store.AgentKey) bool { return k.KeyID == newKey.KeyID })
	p := auth.FromContext(ctx)
	proven := p.Operator != "" || p.Agent == id

	switch {
	case len(valid) == 0 && len(pub) == 0:
		if mode == auth.Required {
			return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "agent.public_key is required: this deployment authenticates every agent (SW4RM_AUTH=required, §6.2)")
		}
		return nil
	case len(valid) == 0:
		err := s.store.Keys().AddAgentKey(ctx, newKey, true)
		switch {
		case errors.Is(err, store.ErrKeyConflict) && mode == auth.Off:
			return nil
		case errors.Is(err, store.ErrKeyConflict):
			return protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "agent %q is held by another key (or this key was revoked); an operator can free it with `sw4rm keys revoke`", id)
		case err != nil:
			return failed("key write", err)
		}
		s.keyEvent(ctx, "auth.key_registered", p, newKey, nil)
		return nil
	case mode == auth.Off || len(pub) == 0 || known:
		return nil // nothing changes
	case !proven:
		return protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "agent %q already has a key; a new one is registered only by a call signed with its current key, or by an operator (§6.2, §23)", id)
	}
	// Rotation: the caller proved a current key (or is an operator).
	if err := s.store.Keys().AddAgentKey(ctx, newKey, false); err != nil {
		if errors.Is(err, store.ErrKeyConflict) {
			return protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "key %s of agent %q was revoked and cannot be registered again", newKey.KeyID, id)
		}
		return failed("key write", err)
	}
	until := now.Add(overlap).UTC()
	if _, err := s.store.Keys().RetireAgentKeys(ctx, id, newKey.KeyID, until); err != nil {
		return failed("key rotation", err)
	}
	retired := make([]string, 0, len(valid))
	for _, k := range valid {
		retired = append(retired, k.KeyID)
	}
	s.keyEvent(ctx, "auth.key_rotated", p, newKey, map[string]any{"retired": retired, "valid_until": until.Format(time.RFC3339)})
	return nil
}

// keyEvent audits a key change and drops this frontend's cached keys of the agent at once
// (the others follow within keyRefresh).
func (s *Server) keyEvent(ctx context.Context, typ string, p auth.Principal, k store.AgentKey, more map[string]any) {
	if s.cfg.Auth != nil {
		s.cfg.Auth.forget(k.AgentID)
	}
	details := map[string]any{"key_id": k.KeyID, "algorithm": k.Algorithm}
	for name, v := range more {
		details[name] = v
	}
	s.sink.Record(ctx, audit.Event{Type: typ, Actor: p.String(), AgentID: k.AgentID, Details: details})
}
