package voting

import (
	"errors"
	"fmt"
	"mime"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
)

// MaxArtifactIDLength is the longest artifact_id ValidateProposal accepts, in characters
// (Unicode code points). The spec only calls artifact_id a "Unique identifier" (RFC §17.5,
// 003 §6.14.1); the bound keeps identifiers usable as keys and in workflow ids.
const MaxArtifactIDLength = 200

// Error classes: every *ValidationError matches exactly one of these with errors.Is, so a
// server can map refusals to gRPC status codes without listing every kind.
var (
	// ErrInvalidArgument marks refusals caused by the request alone (map to gRPC
	// InvalidArgument): a missing or malformed field, or a value out of range.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrFailedPrecondition marks refusals that depend on the room's state (map to gRPC
	// FailedPrecondition): the critic was not requested by the stored proposal, has already
	// voted on it, or the artifact is already decided.
	ErrFailedPrecondition = errors.New("failed precondition")
)

// Error kinds: every *ValidationError also matches exactly one of these with errors.Is.
var (
	// ErrMissingField: a required message or field is nil or empty (class ErrInvalidArgument).
	ErrMissingField = errors.New("missing field")
	// ErrInvalidArtifactType: artifact_type is not REQUIREMENTS, PLAN, CODE or DEPLOYMENT
	// (class ErrInvalidArgument).
	ErrInvalidArtifactType = errors.New("invalid artifact type")
	// ErrInvalidArtifactID: artifact_id is longer than MaxArtifactIDLength or contains
	// whitespace (class ErrInvalidArgument).
	ErrInvalidArtifactID = errors.New("invalid artifact id")
	// ErrInvalidContentType: artifact_content_type is not a MIME type "type/subtype"
	// (class ErrInvalidArgument).
	ErrInvalidContentType = errors.New("invalid content type")
	// ErrNoCritics: requested_critics is empty (class ErrInvalidArgument).
	ErrNoCritics = errors.New("no critics requested")
	// ErrDuplicateCritic: a critic is listed more than once in requested_critics (class
	// ErrInvalidArgument).
	ErrDuplicateCritic = errors.New("duplicate critic")
	// ErrProducerIsCritic: the producer is listed among its own artifact's critics (class
	// ErrInvalidArgument).
	ErrProducerIsCritic = errors.New("producer requested as critic")
	// ErrOutOfRange: a vote's score is outside [0, 10] or its confidence outside [0, 1], or
	// either is NaN or ±Inf (class ErrInvalidArgument).
	ErrOutOfRange = errors.New("value out of range")
	// ErrNotRequested: the voting critic is not among the proposal's requested_critics (class
	// ErrFailedPrecondition).
	ErrNotRequested = errors.New("critic not requested")
	// ErrAlreadyVoted: the critic has already voted on the artifact (class
	// ErrFailedPrecondition).
	ErrAlreadyVoted = errors.New("critic already voted")
	// ErrDecided: the artifact already has a decision, so it takes no more votes (class
	// ErrFailedPrecondition). ValidateVote cannot see decisions; the coordinator that holds
	// the decision returns it, wrapped with the artifact's details.
	ErrDecided = errors.New("artifact already decided")
)

// Temporal ApplicationError types for vote refusals, as returned by ErrorType. The Temporal
// SDK derives the type of a plain Go error from its Go type name ("ValidationError",
// "wrapError"), so a workflow update validator that wants callers to tell these refusals
// apart must return temporal.NewApplicationError(err.Error(), ErrorType(err)).
const (
	// TypeInvalidArgument is the type of every ErrInvalidArgument refusal; it matches the
	// spec's validation_error error code (RFC §11, §21).
	TypeInvalidArgument = "validation_error"
	// TypeNotRequested is the type of an ErrNotRequested refusal.
	TypeNotRequested = "critic_not_requested"
	// TypeAlreadyVoted is the type of an ErrAlreadyVoted refusal.
	TypeAlreadyVoted = "already_voted"
	// TypeDecided is the type of an ErrDecided refusal.
	TypeDecided = "already_decided"
)

// ErrorType names the Temporal ApplicationError type for a refusal from this package:
// TypeDecided, TypeNotRequested or TypeAlreadyVoted when err wraps ErrDecided, ErrNotRequested
// or ErrAlreadyVoted, "" for nil, and TypeInvalidArgument for anything else.
func ErrorType(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrDecided):
		return TypeDecided
	case errors.Is(err, ErrNotRequested):
		return TypeNotRequested
	case errors.Is(err, ErrAlreadyVoted):
		return TypeAlreadyVoted
	default:
		return TypeInvalidArgument
	}
}

// ValidationError is a refused proposal or vote. Its message says exactly what was wrong; it
// matches its Kind (ErrMissingField, ErrNotRequested, ...) and its class (ErrInvalidArgument or
// ErrFailedPrecondition) with errors.Is.
type ValidationError struct {
	// Kind is the ErrXxx sentinel naming what was wrong.
	Kind error
	// Field is the offending field's proto name (e.g. "critic_id", "requested_critics[2]").
	Field string
	// Msg is the full human-readable message returned by Error.
	Msg string
}

// Error returns the message, e.g. `critic "c9" was not requested for artifact "code-123"
// (requested: c1, c2)`.
func (e *ValidationError) Error() string { return e.Msg }

// Unwrap exposes the kind and the class to errors.Is and errors.As.
func (e *ValidationError) Unwrap() []error { return []error{e.Kind, classOf(e.Kind)} }

// classOf returns ErrFailedPrecondition for state-dependent kinds and ErrInvalidArgument for
// the rest.
func classOf(kind error) error {
	if kind == ErrNotRequested || kind == ErrAlreadyVoted || kind == ErrDecided {
		return ErrFailedPrecondition
	}
	return ErrInvalidArgument
}

// refuse builds a *ValidationError.
func refuse(kind error, field, format string, args ...any) error {
	return &ValidationError{Kind: kind, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// ValidateProposal checks a proposal before it is stored (RFC §17.5 "Artifact Types" and
// "Proposal Submission"; 003 §6.14.1), returning the first problem found as a
// *ValidationError (all of class ErrInvalidArgument):
//
//   - the proposal is not nil (ErrMissingField);
//   - artifact_type is REQUIREMENTS, PLAN, CODE or DEPLOYMENT, the four categories
//     "Implementations MUST support" (ErrInvalidArtifactType);
//   - artifact_id is non-empty (ErrMissingField), at most MaxArtifactIDLength characters and
//     free of whitespace (ErrInvalidArtifactID);
//   - producer_id is not empty or blank (ErrMissingField);
//   - artifact_content_type ("MIME type identifier") parses as a media type of the form
//     type/subtype, optionally with parameters (ErrInvalidContentType);
//   - requested_critics is non-empty (ErrNoCritics), has no empty or blank entry
//     (ErrMissingField) and no repeated entry (ErrDuplicateCritic), and does not contain
//     producer_id: a producer cannot review its own artifact (ErrProducerIsCritic).
//
// IDs are compared exactly (case-sensitive). The artifact bytes and negotiation_room_id are
// not checked here.
func ValidateProposal(p *negotiationroompb.NegotiationProposal) error {
	if p == nil {
		return refuse(ErrMissingField, "proposal", "proposal is missing")
	}
	switch t := p.GetArtifactType(); t {
	case negotiationroompb.ArtifactType_REQUIREMENTS, negotiationroompb.ArtifactType_PLAN,
		negotiationroompb.ArtifactType_CODE, negotiationroompb.ArtifactType_DEPLOYMENT:
	default:
		return refuse(ErrInvalidArtifactType, "artifact_type",
			"artifact_type %s is not allowed for artifact %q: must be one of REQUIREMENTS, PLAN, CODE, DEPLOYMENT",
			t, p.GetArtifactId())
	}
	id := p.GetArtifactId()
	if id == "" {
		return refuse(ErrMissingField, "artifact_id", "artifact_id is empty")
	}
	if n := utf8.RuneCountInString(id); n > MaxArtifactIDLength {
		return refuse(ErrInvalidArtifactID, "artifact_id",
			"artifact_id is %d characters long; at most %d are allowed", n, MaxArtifactIDLength)
	}
	if i := strings.IndexFunc(id, unicode.IsSpace); i >= 0 {
		return refuse(ErrInvalidArtifactID, "artifact_id",
			"artifact_id %q contains whitespace at byte %d", id, i)
	}
	if strings.TrimSpace(p.GetProducerId()) == "" {
		return refuse(ErrMissingField, "producer_id", "producer_id is empty for artifact %q", id)
	}
	if err := checkContentType(p.GetArtifactContentType()); err != nil {
		return refuse(ErrInvalidContentType, "artifact_content_type",
			"artifact_content_type %q of artifact %q is not a MIME type of the form type/subtype: %v",
			p.GetArtifactContentType(), id, err)
	}
	critics := p.GetRequestedCritics()
	if len(critics) == 0 {
		return refuse(ErrNoCritics, "requested_critics",
			"requested_critics is empty for artifact %q: at least one critic is required", id)
	}
	first := make(map[string]int, len(critics))
	for i, c := range critics {
		field := fmt.Sprintf("requested_critics[%d]", i)
		if strings.TrimSpace(c) == "" {
			return refuse(ErrMissingField, field, "%s is empty for artifact %q", field, id)
		}
		if j, dup := first[c]; dup {
			return refuse(ErrDuplicateCritic, field,
				"critic %q is listed twice in requested_critics for artifact %q (positions %d and %d)", c, id, j, i)
		}
		first[c] = i
		if c == p.GetProducerId() {
			return refuse(ErrProducerIsCritic, field,
				"producer %q cannot review its own artifact %q: it is listed in requested_critics at position %d", c, id, i)
		}
	}
	return nil
}

// checkContentType accepts a media type "type/subtype" with optional parameters, as parsed by
// mime.ParseMediaType (RFC 2045/6838 token syntax), and refuses a bare "type".
func checkContentType(ct string) error {
	if strings.TrimSpace(ct) == "" {
		return errors.New("it is empty")
	}
	// ParseMediaType ranges over a map only to merge RFC 2231 continuations into its result
	// map; the media type and error it returns do not depend on iteration order, so this is
	// safe in workflow code.
	mediaType, _, err := mime.ParseMediaType(ct) //workflowcheck:ignore
	if err != nil {
		return err
	}
	typ, sub, ok := strings.Cut(mediaType, "/")
	if !ok || typ == "" || sub == "" {
		return errors.New("missing /subtype")
	}
	return nil
}

// ValidateVote checks a vote before it is stored (RFC §17.5 "Voting"; 003 §6.14.1), given the
// critics the proposal requested and the votes already stored for the artifact, returning
// the first problem found as a *ValidationError:
//
//   - the vote is not nil, and artifact_id and critic_id are not empty or blank
//     (ErrMissingField, class ErrInvalidArgument);
//   - score is a finite number within [0, 10] and confidence a finite number within [0, 1]
//     (ErrOutOfRange, class ErrInvalidArgument); NaN and ±Inf are refused;
//   - critic_id is in requestedCritics (ErrNotRequested, class ErrFailedPrecondition);
//   - no vote in already has the same critic_id (ErrAlreadyVoted, class
//     ErrFailedPrecondition): a critic votes once per artifact.
//
// The argument checks come first, so a malformed vote is InvalidArgument whatever the room's
// state. IDs are compared exactly (case-sensitive); nil entries of already are skipped.
func ValidateVote(v *negotiationroompb.NegotiationVote, requestedCritics []string, already []*negotiationroompb.NegotiationVote) error {
	if v == nil {
		return refuse(ErrMissingField, "vote", "vote is missing")
	}
	artifact, critic := v.GetArtifactId(), v.GetCriticId()
	if strings.TrimSpace(artifact) == "" {
		return refuse(ErrMissingField, "artifact_id", "artifact_id of the vote by critic %q is empty", critic)
	}
	if strings.TrimSpace(critic) == "" {
		return refuse(ErrMissingField, "critic_id", "critic_id of the vote on artifact %q is empty", artifact)
	}
	if err := checkRange("score", v.GetScore(), MinVoteScore, MaxVoteScore, "[0, 10]", critic, artifact); err != nil {
		return err
	}
	if err := checkRange("confidence", v.GetConfidence(), MinVoteConfidence, MaxVoteConfidence, "[0, 1]", critic, artifact); err != nil {
		return err
	}
	requested := false
	for _, c := range requestedCritics {
		if c == critic {
			requested = true
			break
		}
	}
	if !requested {
		list := "none"
		if len(requestedCritics) > 0 {
			list = strings.Join(requestedCritics, ", ")
		}
		return refuse(ErrNotRequested, "critic_id",
			"critic %q was not requested for artifact %q (requested: %s)", critic, artifact, list)
	}
	for _, prev := range already {
		if prev != nil && prev.GetCriticId() == critic {
			return refuse(ErrAlreadyVoted, "critic_id",
				"critic %q has already voted on artifact %q", critic, artifact)
		}
	}
	return nil
}

// checkRange refuses a non-finite x or one outside [lo, hi].
func checkRange(field string, x, lo, hi float64, scale, critic, artifact string) error {
	if !finite(x) {
		return refuse(ErrOutOfRange, field,
			"%s %s of critic %q on artifact %q is not a finite number; it must be within %s",
			field, num(x), critic, artifact, scale)
	}
	if x < lo || x > hi {
		return refuse(ErrOutOfRange, field,
			"%s %v of critic %q on artifact %q is out of range %s", field, x, critic, artifact, scale)
	}
	return nil
}
