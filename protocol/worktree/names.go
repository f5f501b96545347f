package worktree

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// Name limits.
const (
	// MaxIDLength bounds repo_id and worktree_id, in bytes: each names one directory, and
	// filesystems allow 255 bytes per name; the rest is left for suffixes.
	MaxIDLength = 128
	// MaxBranchLength bounds a branch name, in bytes.
	MaxBranchLength = 200
)

// ValidateRepoID checks a repo_id (§16: a binding is identified by (repo_id, worktree_id)).
// It names a registered repository and becomes a directory name, so it is one name that git
// and a shell take literally: see ValidateWorktreeID for the rules.
func ValidateRepoID(id string) *protocol.Error { return checkName("repo_id", id, false, MaxIDLength) }

// ValidateWorktreeID checks a worktree_id (§16). It becomes the name of the worktree's
// directory and part of its branch name, so it follows git's rules for reference names (git
// check-ref-format) and, being one directory name, contains no "/" at all — a slash would
// nest directories and make "a" and "a/b" collide. In all: 1 to MaxIDLength bytes of UTF-8;
// no control character, space, ~ ^ : ? * [ \ or "/"; not "@", no "@{", no ".."; not starting
// with "." or "-" (git would read it as an option); not ending with "." or ".lock".
func ValidateWorktreeID(id string) *protocol.Error {
	return checkName("worktree_id", id, false, MaxIDLength)
}

// ValidateBranch checks a branch name by git's rules for reference names (git
// check-ref-format, which git branch applies too): the rules of ValidateWorktreeID, except
// that "/" may separate components — but not begin or end the name, nor repeat — and each
// component obeys the "." and ".lock" rules; at most MaxBranchLength bytes; not "HEAD".
func ValidateBranch(name string) *protocol.Error {
	if err := checkName("branch", name, true, MaxBranchLength); err != nil {
		return err
	}
	if name == "HEAD" {
		return refuse("branch", name, `must not be "HEAD"`)
	}
	return nil
}

// checkName applies git check-ref-format's rules (numbered as in its manual) and the limits
// above to one name.
func checkName(field, s string, slashes bool, maxLen int) *protocol.Error {
	switch {
	case s == "":
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s is required", field)
	case len(s) > maxLen:
		return refuse(field, s, "is longer than "+strconv.Itoa(maxLen)+" bytes")
	case !utf8.ValidString(s):
		return refuse(field, s, "is not valid UTF-8")
	case s == "@": // rule 9
		return refuse(field, s, `must not be "@"`)
	case strings.HasPrefix(s, "-"):
		return refuse(field, s, `must not start with "-" (git would read it as an option)`)
	case strings.Contains(s, ".."): // rule 3
		return refuse(field, s, `must not contain ".."`)
	case strings.Contains(s, "@{"): // rule 8
		return refuse(field, s, `must not contain "@{"`)
	case strings.HasSuffix(s, "."): // rule 7
		return refuse(field, s, `must not end with "."`)
	}
	for _, r := range s {
		switch {
		case r < 0x20 || r == 0x7f: // rule 4
			return refuse(field, s, "must not contain control characters")
		case r == ' ' || r == '~' || r == '^' || r == ':': // rule 4
			return refuse(field, s, "must not contain a space or any of ~ ^ :")
		case r == '?' || r == '*' || r == '[': // rule 5
			return refuse(field, s, "must not contain any of ? * [")
		case r == '\\': // rule 10
			return refuse(field, s, `must not contain "\"`)
		case r == '/' && !slashes:
			return refuse(field, s, `must not contain "/": it names a single directory`)
		}
	}
	if slashes { // rule 6
		switch {
		case strings.HasPrefix(s, "/") || strings.HasSuffix(s, "/"):
			return refuse(field, s, `must not begin or end with "/"`)
		case strings.Contains(s, "//"):
			return refuse(field, s, `must not contain "//"`)
		}
	}
	for _, c := range strings.Split(s, "/") { // rule 1
		switch {
		case strings.HasPrefix(c, "."):
			return refuse(field, s, `must not have a component starting with "."`)
		case strings.HasSuffix(c, ".lock"):
			return refuse(field, s, `must not have a component ending with ".lock"`)
		}
	}
	return nil
}

func refuse(field, s, why string) *protocol.Error {
	return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%s %s %s (git check-ref-format)", field, quote(s), why)
}
