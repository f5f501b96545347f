package protocol

import (
	"regexp"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
)

// MaxDescriptionWords is the §14 limit on an agent description.
const MaxDescriptionWords = 200

// agentIDPattern keeps agent ids usable inside workflow IDs ("agent/<agent_id>"), metric
// labels and file names.
var agentIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$`)

// DefaultModalities are the content types every agent accepts when it declares none: the two
// §12 makes mandatory and text/plain, which it recommends.
var DefaultModalities = []string{"application/json", "application/protobuf", "text/plain"}

// ValidateAgentID checks an agent id's shape.
func ValidateAgentID(id string) *Error {
	if id == "" {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "agent_id is required")
	}
	if !agentIDPattern.MatchString(id) {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "agent_id %q must be 1-128 characters of letters, digits and . _ : @ - starting with a letter or digit", truncate(id))
	}
	if id == SchedulerID {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "agent_id %q is reserved for the scheduler", id)
	}
	return nil
}

// ValidateDescriptor checks an AgentDescriptor at registration (§14): agent_id, name, a
// description of at most 200 words, a defined communication class (§7.3) and modalities that
// are MIME types (§12, "type/subtype" or "type/*").
func ValidateDescriptor(d *registrypb.AgentDescriptor) *Error {
	if d == nil {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "agent descriptor is required")
	}
	if err := ValidateAgentID(d.GetAgentId()); err != nil {
		return err
	}
	if strings.TrimSpace(d.GetName()) == "" {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "name is required (§14)")
	}
	if n := len(strings.Fields(d.GetDescription())); n > MaxDescriptionWords {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "description has %d words; §14 allows at most %d", n, MaxDescriptionWords)
	}
	if _, ok := commonpb.CommunicationClass_name[int32(d.GetCommunicationClass())]; !ok {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "communication_class %d is not PRIVILEGED, STANDARD or BULK (§7.3)", int32(d.GetCommunicationClass()))
	}
	for _, m := range d.GetModalitiesSupported() {
		if err := validateModality(m); err != nil {
			return err
		}
	}
	return nil
}

func validateModality(m string) *Error {
	if _, err := parseMIME(m); err != nil {
		return Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "modality %q is not a MIME type like application/json or image/* (§12)", truncate(m))
	}
	return nil
}

// NormalizeDescriptor fills the defaults documented in docs/architecture.md: STANDARD for an
// unspecified communication class, DefaultModalities when none are declared, and
// STANDARD_AGENT as the registration type. It modifies d, which the caller owns.
func NormalizeDescriptor(d *registrypb.AgentDescriptor) {
	if d.GetCommunicationClass() == commonpb.CommunicationClass_COMM_CLASS_UNSPECIFIED {
		d.CommunicationClass = commonpb.CommunicationClass_STANDARD
	}
	if len(d.GetModalitiesSupported()) == 0 {
		d.ModalitiesSupported = append([]string(nil), DefaultModalities...)
	}
	if d.GetRegistrationType() == registrypb.RegistrationType_REGISTRATION_TYPE_UNSPECIFIED {
		d.RegistrationType = registrypb.RegistrationType_STANDARD_AGENT
	}
}

// AcceptsContentType reports whether an agent that declared modalities accepts a content
// type; "type/*" matches any subtype and parameters are ignored (§12).
func AcceptsContentType(modalities []string, contentType string) bool {
	mt, err := parseMIME(contentType)
	if err != nil {
		return false
	}
	if len(modalities) == 0 {
		modalities = DefaultModalities
	}
	for _, m := range modalities {
		decl, err := parseMIME(m)
		if err != nil {
			continue
		}
		if decl == mt || decl == "*/*" {
			return true
		}
		if strings.HasSuffix(decl, "/*") && strings.HasPrefix(mt, strings.TrimSuffix(decl, "*")) {
			return true
		}
	}
	return false
}

// RegistrationOf checks a RegisterAgent request (§14) and returns its descriptor with the
// defaults filled in (NormalizeDescriptor), as a copy: the request is left as it came.
func RegistrationOf(req *registrypb.RegisterAgentRequest) (*registrypb.AgentDescriptor, *Error) {
	if perr := ValidateDescriptor(req.GetAgent()); perr != nil {
		return nil, perr
	}
	d := proto.CloneOf(req.GetAgent())
	NormalizeDescriptor(d)
	return d, nil
}
