package negotiation

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
)

// MaxProfileNameLength is the longest policy profile name, in characters: a name travels as
// the wire.PolicyProfileKey metadata value and in audit rows.
const MaxProfileNameLength = 64

// ValidateProfiles applies SetPolicyProfiles' rules (§17.2): every name non-blank, unique and
// at most MaxProfileNameLength characters, every policy valid (ValidatePolicy; nil overrides
// nothing and passes). The error lists every problem, each naming its profile.
func ValidateProfiles(profiles []*policypb.PolicyProfile) error {
	var problems []string
	seen := make(map[string]bool, len(profiles))
	for i, p := range profiles {
		name := p.GetName()
		switch {
		case strings.TrimSpace(name) == "":
			problems = append(problems, fmt.Sprintf("profile %d has no name", i))
		case utf8.RuneCountInString(name) > MaxProfileNameLength:
			problems = append(problems, fmt.Sprintf("profile name %q is longer than %d characters", name, MaxProfileNameLength))
		case seen[name]:
			problems = append(problems, fmt.Sprintf("profile %q is given twice", name))
		}
		seen[name] = true
		if err := ValidatePolicy(p.GetPolicy()); err != nil {
			label := fmt.Sprintf("profile %q", name)
			if strings.TrimSpace(name) == "" {
				label = fmt.Sprintf("profile %d", i)
			}
			problems = append(problems, label+": "+err.Error())
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}
