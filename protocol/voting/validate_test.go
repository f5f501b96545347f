package voting

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
)

// validProposal is the 003 §6.14.6 usage example.
func validProposal() *negotiationroompb.NegotiationProposal {
	return &negotiationroompb.NegotiationProposal{
		ArtifactType:        negotiationroompb.ArtifactType_CODE,
		ArtifactId:          "code-123",
		ProducerId:          "agent-producer",
		Artifact:            []byte("def hello(): pass"),
		ArtifactContentType: "text/x-python",
		RequestedCritics:    []string{"critic-1", "critic-2"},
		NegotiationRoomId:   "room-1",
	}
}

func TestValidateProposalAccepts(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*negotiationroompb.NegotiationProposal)
	}{
		{"003 example", func(*negotiationroompb.NegotiationProposal) {}},
		{"REQUIREMENTS", func(p *negotiationroompb.NegotiationProposal) {
			p.ArtifactType = negotiationroompb.ArtifactType_REQUIREMENTS
		}},
		{"PLAN", func(p *negotiationroompb.NegotiationProposal) { p.ArtifactType = negotiationroompb.ArtifactType_PLAN }},
		{"DEPLOYMENT", func(p *negotiationroompb.NegotiationProposal) {
			p.ArtifactType = negotiationroompb.ArtifactType_DEPLOYMENT
		}},
		{"content type with parameters", func(p *negotiationroompb.NegotiationProposal) {
			p.ArtifactContentType = "application/json; charset=utf-8"
		}},
		{"artifact_id of exactly 200 characters (400 bytes)", func(p *negotiationroompb.NegotiationProposal) {
			p.ArtifactId = strings.Repeat("é", 200)
		}},
		{"single critic", func(p *negotiationroompb.NegotiationProposal) { p.RequestedCritics = []string{"c1"} }},
		{"critic ids differing only in case are distinct", func(p *negotiationroompb.NegotiationProposal) {
			p.RequestedCritics = []string{"c1", "C1"}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := validProposal()
			tc.mutate(p)
			assert.NoError(t, ValidateProposal(p))
		})
	}
}

func TestValidateProposalRefuses(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*negotiationroompb.NegotiationProposal) *negotiationroompb.NegotiationProposal
		kind   error
		field  string
		msg    string
	}{
		{"nil proposal", func(*negotiationroompb.NegotiationProposal) *negotiationroompb.NegotiationProposal { return nil },
			ErrMissingField, "proposal", "proposal is missing"},
		{"unspecified artifact type", func(p *negotiationroompb.NegotiationProposal) *negotiationroompb.NegotiationProposal {
			p.ArtifactType = negotiationroompb.ArtifactType_ARTIFACT_TYPE_UNSPECIFIED
			return p
		}, ErrInvalidArtifactType, "artifact_type",
			`artifact_type ARTIFACT_TYPE_UNSPECIFIED is not allowed for artifact "code-123": must be one of REQUIREMENTS, PLAN, CODE, DEPLOYMENT`},
		{"unknown artifact type number", func(p *negotiationroompb.NegotiationProposal) *negotiationroompb.NegotiationProposal {
			p.ArtifactType = 9
			return p
		}, ErrInvalidArtifactType, "artifact_type",
			`artifact_type 9 is not allowed for artifact "code-123": must be one of REQUIREMENTS, PLAN, CODE, DEPLOYMENT`},
		{"empty artifact_id", func(p *negotiationroompb.NegotiationProposal) *negotiationroompb.NegotiationProposal {
			p.ArtifactId = ""
			return p
		}, ErrMissingField, "artifact_id", "artifact_id is empty"},
		{"artifact_id of 201 characters", func(p *negotiationroompb.NegotiationProposal) *negotiationroompb.NegotiationProposal {
			p.ArtifactId = strings.Repeat("a", 201)
			return p
		}, ErrInvalidArtifactID, "artifact_id", "artifact_id is 201 characters long; at most 200 are allowed"},
		{"artifact_id with a space", func(p *negotiationroompb.NegotiationProposal) *negotiationroompb.NegotiationProposal {
			p.ArtifactId = "code 123"
			return p
		}, ErrInvalidArtifactID, "artifact_id", `artifact_id "code 123" contains whitespace at byte 4`},
		{"artifact_id with a trailing newline", func(p *negotiationroompb.NegotiationProposal) *negotiationroompb.NegotiationProposal {
			p.ArtifactId = "code-123\n"
			return p
		}, ErrInvalidArtifactID, "artifact_id", `artifact_id "code-123\n" contains whitespace at byte 8`},
		{"empty producer_id", func(p *negotiationroompb.NegotiationProposal) *negotiationroompb.NegotiationProposal {
			p.ProducerId = ""
			return p
		}, ErrMissingField, "producer_id", `producer_id is empty for artifact "code-123"`},
		{"blank producer_id", func(p *negotiationroompb.NegotiationProposal) *negotiationroompb.NegotiationProposal {
			p.ProducerId = "  "
			return p
		}, ErrMissingField, "producer_id", `producer_id is empty for artifact "code-123"`},
		{"empty content type", func(p *negotiationroompb.NegotiationProposal) *negotiationroompb.NegotiationProposal {
			p.ArtifactContentType = ""
			return p
		}, ErrInvalidContentType, "artifact_content_type",
			`artifact_content_type "" of artifact "code-123" is not a MIME type of the form type/subtype: it is empty`},
		{"content type without subtype", func(p *negotiationroompb.NegotiationProposal) *negotiationroompb.NegotiationProposal {
			p.ArtifactContentType = "text"
			return p
		}, ErrInvalidContentType, "artifact_content_type",
			`artifact_content_type "text" of artifact "code-123" is not a MIME type of the form type/subtype: missing /subtype`},
		{"content type with empty subtype", func(p *negotiationroompb.NegotiationProposal) *negotiationroompb.NegotiationProposal {
			p.ArtifactContentType = "text/"
			return p
		}, ErrInvalidContentType, "artifact_content_type", `artifact_content_type "text/" of artifact "code-123" is not a MIME type`},
		{"content type that is prose", func(p *negotiationroompb.NegotiationProposal) *negotiationroompb.NegotiationProposal {
			p.ArtifactContentType = "python source"
			return p
		}, ErrInvalidContentType, "artifact_content_type", `artifact_content_type "python source" of artifact "code-123" is not a MIME type`},
		{"content type with a broken parameter", func(p *negotiationroompb.NegotiationProposal) *negotiationroompb.NegotiationProposal {
			p.ArtifactContentType = "text/plain; charset"
			return p
		}, ErrInvalidContentType, "artifact_content_type", `artifact_content_type "text/plain; charset" of artifact "code-123" is not a MIME type`},
		{"no critics", func(p *negotiationroompb.NegotiationProposal) *negotiationroompb.NegotiationProposal {
			p.RequestedCritics = nil
			return p
		}, ErrNoCritics, "requested_critics", `requested_critics is empty for artifact "code-123": at least one critic is required`},
		{"empty critic id", func(p *negotiationroompb.NegotiationProposal) *negotiationroompb.NegotiationProposal {
			p.RequestedCritics = []string{"critic-1", ""}
			return p
		}, ErrMissingField, "requested_critics[1]", `requested_critics[1] is empty for artifact "code-123"`},
		{"duplicate critic", func(p *negotiationroompb.NegotiationProposal) *negotiationroompb.NegotiationProposal {
			p.RequestedCritics = []string{"critic-1", "critic-2", "critic-1"}
			return p
		}, ErrDuplicateCritic, "requested_critics[2]",
			`critic "critic-1" is listed twice in requested_critics for artifact "code-123" (positions 0 and 2)`},
		{"producer among its own critics", func(p *negotiationroompb.NegotiationProposal) *negotiationroompb.NegotiationProposal {
			p.RequestedCritics = []string{"critic-1", "agent-producer"}
			return p
		}, ErrProducerIsCritic, "requested_critics[1]",
			`producer "agent-producer" cannot review its own artifact "code-123": it is listed in requested_critics at position 1`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateProposal(tc.mutate(validProposal()))
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.kind)
			assert.ErrorIs(t, err, ErrInvalidArgument)
			assert.NotErrorIs(t, err, ErrFailedPrecondition)
			var ve *ValidationError
			require.True(t, errors.As(err, &ve))
			assert.Equal(t, tc.field, ve.Field)
			assert.True(t, strings.HasPrefix(err.Error(), tc.msg), "got %q, want prefix %q", err.Error(), tc.msg)
		})
	}
}

func TestValidateVote(t *testing.T) {
	requested := []string{"c1", "c2"}
	already := []*negotiationroompb.NegotiationVote{nil, vt("c1", 8, 0.9, true)}
	type tc struct {
		name  string
		vote  *negotiationroompb.NegotiationVote
		req   []string
		kind  error // nil: accepted
		class error
		msg   string
	}
	cases := []tc{
		{name: "accepted", vote: vt("c2", 6.5, 0.6, false)},
		{name: "bounds are inclusive: score 0, confidence 0", vote: vt("c2", 0, 0, false)},
		{name: "bounds are inclusive: score 10, confidence 1", vote: vt("c2", 10, 1, true)},
		{name: "nil vote", vote: nil, kind: ErrMissingField, class: ErrInvalidArgument, msg: "vote is missing"},
		{name: "empty artifact_id", vote: func() *negotiationroompb.NegotiationVote { v := vt("c2", 5, 0.5, true); v.ArtifactId = ""; return v }(),
			kind: ErrMissingField, class: ErrInvalidArgument, msg: `artifact_id of the vote by critic "c2" is empty`},
		{name: "empty critic_id", vote: vt("", 5, 0.5, true),
			kind: ErrMissingField, class: ErrInvalidArgument, msg: `critic_id of the vote on artifact "code-123" is empty`},
		{name: "score below 0", vote: vt("c2", -0.5, 0.5, true),
			kind: ErrOutOfRange, class: ErrInvalidArgument, msg: `score -0.5 of critic "c2" on artifact "code-123" is out of range [0, 10]`},
		{name: "score above 10", vote: vt("c2", 10.5, 0.5, true),
			kind: ErrOutOfRange, class: ErrInvalidArgument, msg: `score 10.5 of critic "c2" on artifact "code-123" is out of range [0, 10]`},
		{name: "score NaN", vote: vt("c2", math.NaN(), 0.5, true),
			kind: ErrOutOfRange, class: ErrInvalidArgument, msg: `score NaN of critic "c2" on artifact "code-123" is not a finite number; it must be within [0, 10]`},
		{name: "score +Inf", vote: vt("c2", math.Inf(1), 0.5, true),
			kind: ErrOutOfRange, class: ErrInvalidArgument, msg: `score +Inf of critic "c2" on artifact "code-123" is not a finite number; it must be within [0, 10]`},
		{name: "confidence below 0", vote: vt("c2", 5, -0.01, true),
			kind: ErrOutOfRange, class: ErrInvalidArgument, msg: `confidence -0.01 of critic "c2" on artifact "code-123" is out of range [0, 1]`},
		{name: "confidence above 1", vote: vt("c2", 5, 1.1, true),
			kind: ErrOutOfRange, class: ErrInvalidArgument, msg: `confidence 1.1 of critic "c2" on artifact "code-123" is out of range [0, 1]`},
		{name: "confidence -Inf", vote: vt("c2", 5, math.Inf(-1), true),
			kind: ErrOutOfRange, class: ErrInvalidArgument, msg: `confidence -Inf of critic "c2" on artifact "code-123" is not a finite number; it must be within [0, 1]`},
		{name: "critic not requested", vote: vt("c9", 5, 0.5, true),
			kind: ErrNotRequested, class: ErrFailedPrecondition, msg: `critic "c9" was not requested for artifact "code-123" (requested: c1, c2)`},
		{name: "no critics requested", vote: vt("c1", 5, 0.5, true), req: []string{},
			kind: ErrNotRequested, class: ErrFailedPrecondition, msg: `critic "c1" was not requested for artifact "code-123" (requested: none)`},
		{name: "critic ids are case-sensitive", vote: vt("C2", 5, 0.5, true),
			kind: ErrNotRequested, class: ErrFailedPrecondition, msg: `critic "C2" was not requested for artifact "code-123" (requested: c1, c2)`},
		{name: "critic already voted", vote: vt("c1", 9, 0.9, true),
			kind: ErrAlreadyVoted, class: ErrFailedPrecondition, msg: `critic "c1" has already voted on artifact "code-123"`},
		{name: "argument errors win over state errors", vote: vt("c9", 11, 0.5, true),
			kind: ErrOutOfRange, class: ErrInvalidArgument, msg: `score 11 of critic "c9" on artifact "code-123" is out of range [0, 10]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := requested
			if c.req != nil {
				req = c.req
			}
			err := ValidateVote(c.vote, req, already)
			if c.kind == nil {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.EqualError(t, err, c.msg)
			assert.ErrorIs(t, err, c.kind)
			assert.ErrorIs(t, err, c.class)
			other := ErrInvalidArgument
			if c.class == ErrInvalidArgument {
				other = ErrFailedPrecondition
			}
			assert.NotErrorIs(t, err, other)
		})
	}
}

func TestErrorType(t *testing.T) {
	requested := []string{"c1", "c2"}
	already := []*negotiationroompb.NegotiationVote{vt("c1", 8, 0.9, true)}
	assert.Equal(t, "", ErrorType(nil))
	assert.Equal(t, TypeNotRequested, ErrorType(ValidateVote(vt("c9", 5, 0.5, true), requested, already)))
	assert.Equal(t, TypeAlreadyVoted, ErrorType(ValidateVote(vt("c1", 5, 0.5, true), requested, already)))
	assert.Equal(t, TypeInvalidArgument, ErrorType(ValidateVote(vt("c2", 11, 0.5, true), requested, already)))
	assert.Equal(t, TypeInvalidArgument, ErrorType(ValidateProposal(nil)))
	decided := fmt.Errorf("%w: artifact %q was already decided (APPROVED)", ErrDecided, "code-123")
	assert.Equal(t, TypeDecided, ErrorType(decided))
	assert.Equal(t, TypeDecided, ErrorType(&ValidationError{Kind: ErrDecided, Msg: "decided"}))
	assert.ErrorIs(t, &ValidationError{Kind: ErrDecided, Msg: "decided"}, ErrFailedPrecondition)
}
