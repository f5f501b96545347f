package hitl

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// UnavailableCode is the error_code of §15.4: a negotiation aborted because a human was
// needed, the HITL component was unavailable and the fallback denied.
const UnavailableCode = "hitl_unavailable"

// MaxConfiguredExtensions is the largest max_extensions a deployment or a negotiation may
// configure for EXTEND_TIMEOUT: §15.4 requires a maximum retry count and recommends 3.
const MaxConfiguredExtensions = 3

// The fields of a configured fallback, as FallbackError names them.
const (
	// FieldPolicy is the policy name (hitl_unavailable_policy).
	FieldPolicy = "policy"
	// FieldThreshold is AUTO_DECIDE_THRESHOLD's auto-approve threshold.
	FieldThreshold = "threshold"
	// FieldMaxExtensions is EXTEND_TIMEOUT's maximum retry count.
	FieldMaxExtensions = "max_extensions"
	// FieldExtendBy is EXTEND_TIMEOUT's extension.
	FieldExtendBy = "extend_by"
)

// FallbackError is a refusal of a configured fallback; Field says which of its values is
// wrong, so that the caller can name the setting or the metadata key that carried it.
type FallbackError struct {
	// Field is FieldPolicy, FieldThreshold, FieldMaxExtensions or FieldExtendBy.
	Field string
	// Msg says what is wrong.
	Msg string
}

// Error implements error.
func (e *FallbackError) Error() string { return e.Field + ": " + e.Msg }

func fallbackError(field, format string, args ...any) error {
	return &FallbackError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// ParsePolicyName accepts a fallback policy name (§15.4 hitl_unavailable_policy) in any case.
func ParsePolicyName(s string) (string, error) {
	p := strings.ToUpper(strings.TrimSpace(s))
	switch p {
	case DenyByDefault, AutoDecideThreshold, ExtendTimeout:
		return p, nil
	}
	return "", fallbackError(FieldPolicy, "%q is not DENY_BY_DEFAULT, AUTO_DECIDE_THRESHOLD or EXTEND_TIMEOUT", s)
}

// CheckConfigured checks a fallback chosen by configuration — a deployment's settings or a
// negotiation's request metadata — rather than by the code that raises an invocation: its
// policy is one of the three of §15.4; AUTO_DECIDE_THRESHOLD has a threshold in (0, 1] (a
// zero threshold would approve everything); EXTEND_TIMEOUT's max_extensions is at most
// MaxConfiguredExtensions (zero: DefaultMaxExtensions) and its extend_by is not negative; and
// no value is given that its policy would ignore. An empty policy with no other value is
// "not configured" and valid. The error is a *FallbackError.
func (f Fallback) CheckConfigured() error {
	if f.Policy == "" {
		switch {
		case f.Threshold != 0:
			return fallbackError(FieldThreshold, "is set but no policy is: it applies to AUTO_DECIDE_THRESHOLD only")
		case f.MaxExtensions != 0:
			return fallbackError(FieldMaxExtensions, "is set but no policy is: it applies to EXTEND_TIMEOUT only")
		case f.ExtendBy != 0:
			return fallbackError(FieldExtendBy, "is set but no policy is: it applies to EXTEND_TIMEOUT only")
		}
		return nil
	}
	switch f.Policy {
	case DenyByDefault, AutoDecideThreshold, ExtendTimeout:
	default:
		return fallbackError(FieldPolicy, "%q is not DENY_BY_DEFAULT, AUTO_DECIDE_THRESHOLD or EXTEND_TIMEOUT", f.Policy)
	}
	if f.Policy == AutoDecideThreshold {
		if math.IsNaN(f.Threshold) || f.Threshold <= 0 || f.Threshold > 1 {
			return fallbackError(FieldThreshold, "AUTO_DECIDE_THRESHOLD needs an auto-approve threshold in (0, 1], not %s", strconv.FormatFloat(f.Threshold, 'g', -1, 64))
		}
	} else if f.Threshold != 0 {
		return fallbackError(FieldThreshold, "applies to AUTO_DECIDE_THRESHOLD only, not %s", f.Policy)
	}
	if f.Policy == ExtendTimeout {
		if f.MaxExtensions < 0 || f.MaxExtensions > MaxConfiguredExtensions {
			return fallbackError(FieldMaxExtensions, "EXTEND_TIMEOUT allows 1 to %d extensions (§15.4), not %d", MaxConfiguredExtensions, f.MaxExtensions)
		}
		if f.ExtendBy < 0 {
			return fallbackError(FieldExtendBy, "must not be negative")
		}
	} else if f.MaxExtensions != 0 || f.ExtendBy != 0 {
		field := FieldMaxExtensions
		if f.MaxExtensions == 0 {
			field = FieldExtendBy
		}
		return fallbackError(field, "applies to EXTEND_TIMEOUT only, not %s", f.Policy)
	}
	return nil
}

// ParseFallback reads a configured fallback from its text form, each value possibly empty
// (unset): the policy name (any case), the auto-approve threshold (a number), the maximum
// number of extensions (an integer) and the extension (a Go duration such as "30s"). The
// result is checked by CheckConfigured; the error is a *FallbackError.
func ParseFallback(policy, threshold, maxExtensions, extendBy string) (Fallback, error) {
	var f Fallback
	var err error
	if strings.TrimSpace(policy) != "" {
		if f.Policy, err = ParsePolicyName(policy); err != nil {
			return Fallback{}, err
		}
	}
	if threshold = strings.TrimSpace(threshold); threshold != "" {
		if f.Threshold, err = strconv.ParseFloat(threshold, 64); err != nil {
			return Fallback{}, fallbackError(FieldThreshold, "%q is not a number", threshold)
		}
	}
	if maxExtensions = strings.TrimSpace(maxExtensions); maxExtensions != "" {
		if f.MaxExtensions, err = strconv.Atoi(maxExtensions); err != nil || f.MaxExtensions <= 0 {
			return Fallback{}, fallbackError(FieldMaxExtensions, "%q is not a whole number from 1 to %d", maxExtensions, MaxConfiguredExtensions)
		}
	}
	if extendBy = strings.TrimSpace(extendBy); extendBy != "" {
		if f.ExtendBy, err = time.ParseDuration(extendBy); err != nil || f.ExtendBy <= 0 {
			return Fallback{}, fallbackError(FieldExtendBy, "%q is not a positive duration like 30s", extendBy)
		}
	}
	if err := f.CheckConfigured(); err != nil {
		return Fallback{}, err
	}
	return f, nil
}

// FallbackFor returns the fallback an invocation gets when it sets no policy of its own: the
// deployment's (p.Fallback, SW4RM_HITL_UNAVAILABLE_POLICY) or else DENY_BY_DEFAULT, with the
// invocation's own score, which AUTO_DECIDE_THRESHOLD compares with the threshold. An
// invocation that sets a policy keeps its fallback whole.
func (p Policy) FallbackFor(own Fallback) Fallback {
	if own.Policy != "" {
		return own
	}
	f := Fallback{Policy: DenyByDefault}
	if p.Fallback != nil && p.Fallback.Policy != "" {
		f = *p.Fallback
	}
	f.Score = own.Score
	return f
}
