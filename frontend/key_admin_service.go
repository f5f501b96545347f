package frontend

import (
	"context"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/keyadminpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/signing"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// keyAdminService serves the extension sw4rmext.keys.v1.KeyAdminService: listing agents' keys
// and revoking them (§23), for operators only.
type keyAdminService struct {
	keyadminpb.UnimplementedKeyAdminServiceServer
	s *Server
}

// authenticate returns the name of the operator making the call: the operator the call was
// proven to come from (auth.FromContext), else the operator of its bearer token, authenticated
// as every operator service does. A call proven to come from an agent and without an
// operator's token is authenticated but not allowed: PermissionDenied, where an anonymous
// call is Unauthenticated.
func (k *keyAdminService) authenticate(ctx context.Context) (string, error) {
	p := auth.FromContext(ctx)
	if p.Operator != "" {
		return p.Operator, nil
	}
	op, _, err := k.s.operatorFromToken(ctx)
	if err != nil && p.Agent != "" {
		return "", protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "key administration is for operators, and this call is agent %s's (%s)",
			p.Agent, status.Convert(err).Message())
	}
	return op.Name, err
}

// ListKeys lists one agent's keys, or every agent's.
func (k *keyAdminService) ListKeys(ctx context.Context, req *keyadminpb.ListKeysRequest) (*keyadminpb.ListKeysResponse, error) {
	if _, err := k.authenticate(ctx); err != nil {
		return nil, err
	}
	keys, err := k.s.store.Keys().ListAgentKeys(ctx, req.GetAgentId())
	if err != nil {
		return nil, toStatus(ctx, failed("list keys", err)).Err()
	}
	return &keyadminpb.ListKeysResponse{Keys: agentKeysPB(keys, time.Now())}, nil
}

// RevokeKey revokes one key of the agent, or every key of it, records the operator and the
// reason with each key and audits the revocation as auth.key_revoked (§6.5, §23). Frontends
// notice through the store's keys generation and stop accepting the keys. Revoking a key that
// is already revoked changes nothing and is not audited; an unknown agent or key is NotFound.
func (k *keyAdminService) RevokeKey(ctx context.Context, req *keyadminpb.RevokeKeyRequest) (*keyadminpb.RevokeKeyResponse, error) {
	op, err := k.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	r, perr := signing.RevocationOf(req)
	if perr != nil {
		return nil, perr
	}
	at := time.Now().UTC().Truncate(time.Microsecond)
	n, err := k.s.store.Keys().RevokeAgentKey(ctx, r.AgentID, r.KeyID, at, op, r.Reason)
	if err != nil {
		what := "revoke the keys of " + r.AgentID
		if r.KeyID != "" {
			what = "revoke key " + r.KeyID + " of " + r.AgentID
		}
		return nil, toStatus(ctx, failed(what, err)).Err()
	}
	keys := k.revoked(ctx, op, r, n, at)
	return &keyadminpb.RevokeKeyResponse{Revoked: uint32(n), Keys: agentKeysPB(keys, at)}, nil
}

// revoked lists the agent's keys after a revocation of n keys at at, and audits the
// revocation as auth.key_revoked when it changed anything.
func (k *keyAdminService) revoked(ctx context.Context, op string, r signing.Revocation, n int, at time.Time) []store.AgentKey {
	keys, err := k.s.store.Keys().ListAgentKeys(ctx, r.AgentID)
	if err != nil {
		// The revocation stands; only the listing of its result failed.
		k.s.log.Warn("listing keys after a revocation failed", "agent_id", r.AgentID, "error", err)
	}
	if n == 0 {
		return keys
	}
	var ids []string
	for _, key := range keys {
		if key.RevokedAt.Equal(at) && key.RevokedBy == op {
			ids = append(ids, key.KeyID)
		}
	}
	k.s.sink.Record(ctx, audit.Event{Actor: op, Type: "auth.key_revoked", AgentID: r.AgentID, Details: map[string]any{
		"key_id": r.KeyID, "revoked": n, "key_ids": ids, "reason": r.Reason, "via": viaOf(ctx),
	}})
	return keys
}

// agentKeysPB converts keys for the wire, each with whether it is valid at now.
func agentKeysPB(keys []store.AgentKey, now time.Time) []*keyadminpb.AgentKey {
	out := make([]*keyadminpb.AgentKey, len(keys))
	for i, k := range keys {
		out[i] = &keyadminpb.AgentKey{
			AgentId: k.AgentID, KeyId: k.KeyID, Algorithm: k.Algorithm, PublicKey: k.PublicKey,
			AddedAt: timestamppb.New(k.AddedAt), NotAfter: optionalTimestamp(k.NotAfter), RevokedAt: optionalTimestamp(k.RevokedAt),
			RevokedBy: k.RevokedBy, RevokeReason: k.RevokeReason, Valid: k.ValidAt(now),
		}
	}
	return out
}

// optionalTimestamp leaves a zero time unset.
func optionalTimestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
