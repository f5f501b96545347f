package mcp

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
)

// WorktreePlaceholder in a stdio server's arguments stands for the calling agent's worktree
// (§16): the server is started once per worktree, with the placeholder replaced by the
// worktree's absolute path — how a filesystem server is confined to the caller's worktree.
const WorktreePlaceholder = "{worktree}"

// Provider is one MCP server the deployment configures as a tool provider, under the
// provider_id its tools are registered with.
type Provider struct {
	// ID is the provider_id.
	ID string
	// Server says how to reach it. A stdio command line may hold WorktreePlaceholder in its
	// arguments.
	Server Server
	// Network is the network posture the operator declares for the server: the most
	// network access any of its tools uses (§18.5.2). SW4RM cannot confine a server per
	// call — one process or host serves every call of a session — so it takes the
	// operator's word, and refuses a call whose network_policy is stricter than the
	// posture. Empty means unknown, treated as FULL_ACCESS.
	Network tool.NetworkPolicy
}

// PerWorktree reports whether the server's command line holds WorktreePlaceholder: then it
// runs once per calling worktree, and its tools need one (needs_worktree).
func (p Provider) PerWorktree() bool {
	for _, a := range p.Server.Command {
		if strings.Contains(a, WorktreePlaceholder) {
			return true
		}
	}
	return false
}

// Posture is the declared network posture, FULL_ACCESS when none was declared.
func (p Provider) Posture() tool.NetworkPolicy {
	if p.Network == "" {
		return tool.NetworkFullAccess
	}
	return p.Network
}

// Options are the descriptor options the provider's configuration implies: a per-worktree
// server's tools need the caller's worktree.
func (p Provider) Options() Options {
	return Options{NeedsWorktree: p.PerWorktree()}
}

// ServerFor is the server to start for calls from worktree: Server with WorktreePlaceholder
// replaced by worktree in every argument. worktree must be an absolute path when the
// provider is per worktree; it is ignored otherwise. The program itself never comes from
// the worktree — ParseProviders refuses the placeholder there, and so does ServerFor — since
// the worktree's content is the agent's to write.
func (p Provider) ServerFor(worktree string) (Server, error) {
	if !p.PerWorktree() {
		return p.Server, nil
	}
	if strings.Contains(p.Server.Command[0], WorktreePlaceholder) {
		return Server{}, tool.Errorf(tool.CodeInternal, "provider %q: %s names the program, which must not come from a worktree", p.ID, WorktreePlaceholder)
	}
	if worktree == "" {
		return Server{}, tool.Errorf(tool.CodePermissionDenied, "provider %q runs in the caller's worktree, and the caller is not bound to a worktree (§16)", p.ID)
	}
	if !filepath.IsAbs(worktree) {
		return Server{}, tool.Errorf(tool.CodeInternal, "provider %q: the worktree %q is not an absolute path", p.ID, worktree)
	}
	s := p.Server
	s.Command = slices.Clone(p.Server.Command)
	worktree = filepath.Clean(worktree)
	for i := 1; i < len(s.Command); i++ {
		s.Command[i] = strings.ReplaceAll(s.Command[i], WorktreePlaceholder, worktree)
	}
	s.Worktree = worktree // what its sandbox lets it write
	return s, nil
}

// ParseProviders reads SW4RM_MCP_SERVERS: providers separated by ";", each
// "<provider_id>[<options>]=<server>", the bracketed options optional. The server is
// "stdio:<command line>" (the command line split on spaces, no quoting; its arguments may
// hold WorktreePlaceholder) or an http or https URL (streamable HTTP). The options are
// comma-separated "key=value" pairs; the only key is "network", the server's declared
// network posture (Provider.Network): one of DENY_ALL, EGRESS_RESTRICTED,
// EGRESS_UNRESTRICTED, FULL_ACCESS. Example:
//
//	fs[network=DENY_ALL]=stdio:mcp-server-filesystem {worktree};search=https://tools.example/mcp
//
// Empty means none. Provider ids follow tool.ValidateProviderID (which admits no "[") and
// are unique.
func ParseProviders(v string) ([]Provider, error) {
	var out []Provider
	seen := map[string]bool{}
	for part := range strings.SplitSeq(v, ";") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		p, err := parseProvider(part)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", part, err)
		}
		if seen[p.ID] {
			return nil, fmt.Errorf("provider %q is configured twice", p.ID)
		}
		seen[p.ID] = true
		out = append(out, p)
	}
	return out, nil
}

// parseProvider reads one "<provider_id>[<options>]=<server>".
func parseProvider(part string) (Provider, error) {
	const want = "want provider_id=stdio:command args..., provider_id=http://url, or provider_id[network=DENY_ALL]=..."
	var p Provider
	// The id ends at the first "[" or "=": neither can be part of a provider_id.
	i := strings.IndexAny(part, "[=")
	if i < 0 {
		return Provider{}, fmt.Errorf("no server: %s", want)
	}
	p.ID = strings.TrimSpace(part[:i])
	rest := part[i:]
	if rest[0] == '[' {
		opts, after, ok := strings.Cut(rest[1:], "]")
		if !ok {
			return Provider{}, fmt.Errorf("the options after %q are not closed with ]", p.ID)
		}
		if err := p.parseOptions(opts); err != nil {
			return Provider{}, err
		}
		rest = strings.TrimSpace(after)
	}
	target, ok := strings.CutPrefix(rest, "=")
	if target = strings.TrimSpace(target); !ok || target == "" {
		return Provider{}, fmt.Errorf("no server: %s", want)
	}
	if err := tool.ValidateProviderID(p.ID); err != nil {
		return Provider{}, err
	}
	switch {
	case strings.HasPrefix(target, "stdio:"):
		p.Server.Command = strings.Fields(strings.TrimPrefix(target, "stdio:"))
		if len(p.Server.Command) == 0 {
			return Provider{}, fmt.Errorf("stdio: names no command")
		}
		if strings.Contains(p.Server.Command[0], WorktreePlaceholder) {
			// The worktree is the agent's to write: a program from it would be the agent's.
			return Provider{}, fmt.Errorf("%s may stand for an argument, not for the program", WorktreePlaceholder)
		}
		// A server declared DENY_ALL gets no network at all (Server.IsolateNetwork).
		p.Server.IsolateNetwork = p.Network == tool.NetworkDenyAll
	case strings.HasPrefix(target, "http://"), strings.HasPrefix(target, "https://"):
		if strings.Contains(target, WorktreePlaceholder) {
			return Provider{}, fmt.Errorf("%s is for stdio servers, which SW4RM starts; a URL names a server that is already running", WorktreePlaceholder)
		}
		p.Server.URL = target
	default:
		return Provider{}, fmt.Errorf("the server is neither stdio:<command line> nor an http or https URL")
	}
	return p, nil
}

// parseOptions reads the bracketed "key=value,..." options of a provider.
func (p *Provider) parseOptions(opts string) error {
	seen := map[string]bool{}
	for kv := range strings.SplitSeq(opts, ",") {
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		if !ok || k == "" || v == "" {
			return fmt.Errorf("option %q: want key=value, e.g. network=DENY_ALL", strings.TrimSpace(kv))
		}
		if seen[k] {
			return fmt.Errorf("option %q is given twice", k)
		}
		seen[k] = true
		switch k {
		case "network":
			n := tool.NetworkPolicy(strings.ToUpper(v))
			if !slices.Contains(tool.NetworkPolicies(), n) {
				return fmt.Errorf("network=%s: not one of DENY_ALL, EGRESS_RESTRICTED, EGRESS_UNRESTRICTED, FULL_ACCESS", v)
			}
			p.Network = n
		default:
			return fmt.Errorf("unknown option %q: the only option is network", k)
		}
	}
	return nil
}

// ImportProvider connects to a configured provider's server, lists its tools with the
// options its configuration implies (Provider.Options) and ends the session. A per-worktree
// server is started for the listing with an empty temporary directory as its worktree,
// removed afterwards: what a server offers must not depend on which worktree it serves.
func ImportProvider(ctx context.Context, p Provider) (Import, error) {
	worktree := ""
	if p.PerWorktree() {
		dir, err := os.MkdirTemp("", "sw4rm-mcp-import-")
		if err != nil {
			return Import{}, fmt.Errorf("a directory to list provider %q in: %w", p.ID, err)
		}
		defer os.RemoveAll(dir)
		worktree = dir
	}
	s, err := p.ServerFor(worktree)
	if err != nil {
		return Import{}, err
	}
	c, err := Connect(ctx, s)
	if err != nil {
		return Import{}, err
	}
	defer func() { _ = c.Close() }()
	return c.ListTools(ctx, p.Options())
}

// InstalledServer returns the path of an npm MCP server's program (e.g.
// "mcp-server-filesystem") as `make mcp-servers` installs it: in SW4RM_MCP_SERVERS_DIR, else
// ~/.cache/sw4rm/mcp, under node_modules/.bin. It fails, saying what to run, when the program
// or Node.js is missing.
func InstalledServer(program string) (string, error) {
	dir := os.Getenv("SW4RM_MCP_SERVERS_DIR")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(home, ".cache", "sw4rm", "mcp")
	}
	path := filepath.Join(dir, "node_modules", ".bin", program)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s is not installed in %s: run `make mcp-servers`", program, dir)
	}
	if _, err := exec.LookPath("node"); err != nil {
		return "", fmt.Errorf("%s needs Node.js, which is not on the PATH", program)
	}
	return path, nil
}
