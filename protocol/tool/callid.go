package tool

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxCallIDLength bounds a call_id, in bytes: it becomes part of a workflow ID and of log
// lines, and a UUID with a prefix fits with room to spare.
const MaxCallIDLength = 128

// CallIDPrefix starts every call_id the scheduler assigns (§18.2's example: "tool-9f5c").
const CallIDPrefix = "tool-"

// WorkflowIDPrefix starts the workflow ID of every call: a call is the workflow
// "tool/<call_id>".
const WorkflowIDPrefix = "tool/"

// WorkflowID is the ID of the workflow that runs a call.
func WorkflowID(callID string) string { return WorkflowIDPrefix + callID }

// ValidateCallID checks a call_id given by the caller (§18.2). It names a workflow and
// appears in logs and URLs, so it is 1 to MaxCallIDLength bytes of ASCII letters, digits and
// "-", "_", ".", ":", starting with a letter or digit. An empty one is refused here: the
// scheduler assigns one instead (AssignCallID).
func ValidateCallID(id string) error {
	switch {
	case id == "":
		return Errorf(CodeValidation, "call_id is required")
	case len(id) > MaxCallIDLength:
		return Errorf(CodeValidation, "call_id is longer than %d bytes", MaxCallIDLength)
	case !utf8.ValidString(id):
		return Errorf(CodeValidation, "call_id is not valid UTF-8")
	}
	for i, r := range id {
		if isAlnum(r) || (i > 0 && strings.ContainsRune("-_.:", r)) {
			continue
		}
		if i == 0 {
			return Errorf(CodeValidation, "call_id %s must start with a letter or digit", strconv.Quote(id))
		}
		return Errorf(CodeValidation, "call_id %s contains %q: only letters, digits and - _ . : are allowed", strconv.Quote(id), r)
	}
	return nil
}

// AssignCallID returns the call's call_id (§18.2: "The Scheduler assigns a call_id"): the
// caller's own, when it gave one that is valid, else CallIDPrefix followed by fresh — a
// unique token (a UUID) the caller of this function generates, because this package does not
// generate randomness.
func AssignCallID(given, fresh string) (string, error) {
	if given != "" {
		if err := ValidateCallID(given); err != nil {
			return "", err
		}
		return given, nil
	}
	id := CallIDPrefix + fresh
	if err := ValidateCallID(id); err != nil || fresh == "" {
		return "", Errorf(CodeInternal, "the assigned call_id %s is not valid", strconv.Quote(id))
	}
	return id, nil
}

func isAlnum(r rune) bool {
	return (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
}
