// Package hlc is the Hybrid Logical Clock of §4 and §5.2 (Kulkarni et al., "Logical Physical
// Clocks and Consistent Snapshots in Globally Distributed Databases", 2014): a timestamp that
// stays close to physical time yet orders every event after the events it causally follows,
// even when the hosts' wall clocks disagree.
//
// A Timestamp is physical time in Unix microseconds, a logical counter and the node that
// stamped it. Its text form is §4's "<physical>.<logical>.<node>", with the physical part
// zero-padded to 16 digits and the logical part to 6, so that comparing two strings byte by
// byte gives the same answer as Compare: a database can order or take the max() of the text
// column. Parse also accepts the unpadded shape of §4's example ("1725552000.000001.node-a").
//
// The HLC is advisory (§24: "MUST NOT use HLC alone for correctness-critical ordering"):
// nothing in the protocol's decisions reads it; it is there for operators who reconstruct
// causal chains from audit rows and envelopes.
//
// The package is pure: the physical clock is a function the caller injects.
package hlc

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// PhysicalDigits is the width the physical part is padded to: Unix microseconds have 16
	// digits until the year 2286.
	PhysicalDigits = 16
	// LogicalDigits is the width the logical part is padded to.
	LogicalDigits = 6
	// MaxPhysical is the largest physical part the text form holds.
	MaxPhysical int64 = 9_999_999_999_999_999
	// MaxLogical is the largest logical counter the text form holds; a clock whose counter
	// would pass it moves its physical part one microsecond on instead (see Clock).
	MaxLogical uint32 = 999_999
	// MaxNodeLen bounds a node identifier, in bytes.
	MaxNodeLen = 64
	// DefaultMaxOffset is the skew budget of a Clock built without one (§24: "document skew
	// budgets"): a remote timestamp more than this ahead of the local physical time is refused.
	DefaultMaxOffset = time.Minute
)

var (
	// ErrSyntax reports text that is not a timestamp; Parse wraps it with the detail.
	ErrSyntax = errors.New("hlc: malformed timestamp")
	// ErrOffset reports a remote timestamp further ahead of the local physical time than the
	// clock's skew budget; Update wraps it with the detail.
	ErrOffset = errors.New("hlc: timestamp too far ahead of the local clock")
)

// Timestamp is one HLC reading (§4).
type Timestamp struct {
	// Physical is the physical part, in Unix microseconds.
	Physical int64
	// Logical is the counter that orders events within one physical microsecond.
	Logical uint32
	// Node identifies the process that stamped it; it breaks ties, nothing more.
	Node string
}

// IsZero reports whether t is the zero Timestamp (no reading).
func (t Timestamp) IsZero() bool { return t == Timestamp{} }

// String is the text form "<physical>.<logical>.<node>", padded so that byte order is
// Compare's order; the zero Timestamp is "".
func (t Timestamp) String() string {
	if t.IsZero() {
		return ""
	}
	return fmt.Sprintf("%0*d.%0*d.%s", PhysicalDigits, t.Physical, LogicalDigits, t.Logical, t.Node)
}

// Time is the physical part as a time.Time.
func (t Timestamp) Time() time.Time { return time.UnixMicro(t.Physical).UTC() }

// Compare orders timestamps by physical part, then logical counter, then node: -1 when t
// is before u, +1 when after, 0 when equal.
func (t Timestamp) Compare(u Timestamp) int {
	switch {
	case t.Physical != u.Physical:
		return cmp(t.Physical < u.Physical)
	case t.Logical != u.Logical:
		return cmp(t.Logical < u.Logical)
	case t.Node != u.Node:
		return cmp(t.Node < u.Node)
	}
	return 0
}

func cmp(less bool) int {
	if less {
		return -1
	}
	return 1
}

// Before reports whether t orders before u.
func (t Timestamp) Before(u Timestamp) bool { return t.Compare(u) < 0 }

// Parse reads the text form. The physical part is 1 to 16 decimal digits and the logical
// part 1 to 6 (so §4's example "1725552000.000001.node-a" parses as well as String's padded
// form); the node is 1 to MaxNodeLen bytes of letters, digits, '-', '_' and ':'.
func Parse(s string) (Timestamp, error) {
	q := quote(s)
	parts := strings.SplitN(s, ".", 3)
	if len(parts) != 3 {
		return Timestamp{}, fmt.Errorf("%w %s: want <physical>.<logical>.<node>", ErrSyntax, q)
	}
	phys, err := digits(parts[0], PhysicalDigits)
	if err != nil {
		return Timestamp{}, fmt.Errorf("%w %s: physical part (Unix microseconds) %v", ErrSyntax, q, err)
	}
	logical, err := digits(parts[1], LogicalDigits)
	if err != nil {
		return Timestamp{}, fmt.Errorf("%w %s: logical part %v", ErrSyntax, q, err)
	}
	if err := ValidNode(parts[2]); err != nil {
		return Timestamp{}, fmt.Errorf("%w %s: %v", ErrSyntax, q, err)
	}
	return Timestamp{Physical: phys, Logical: uint32(logical), Node: parts[2]}, nil
}

// quote quotes s for an error, cut short: the text may come from anyone.
func quote(s string) string {
	const maxQuoted = 80
	if len(s) > maxQuoted {
		return strconv.Quote(s[:maxQuoted]) + "…"
	}
	return strconv.Quote(s)
}

// digits parses 1 to max ASCII decimal digits.
func digits(s string, max int) (int64, error) {
	if s == "" || len(s) > max {
		return 0, fmt.Errorf("must be 1 to %d decimal digits", max)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("must be 1 to %d decimal digits", max)
		}
	}
	// Cannot fail: at most 16 digits fit an int64.
	return strconv.ParseInt(s, 10, 64)
}

// ValidNode checks a node identifier: 1 to MaxNodeLen bytes of letters, digits, '-', '_'
// and ':'. A '.' is refused because it separates the text form's parts.
func ValidNode(node string) error {
	if node == "" || len(node) > MaxNodeLen {
		return fmt.Errorf("node must be 1 to %d characters", MaxNodeLen)
	}
	for _, c := range []byte(node) {
		if !nodeByte(c) {
			return fmt.Errorf("node %q: only letters, digits, '-', '_' and ':' are allowed", node)
		}
	}
	return nil
}

func nodeByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == ':'
}

// Clock is one process's HLC. It is safe for concurrent use.
type Clock struct {
	node      string
	physical  func() time.Time
	maxOffset time.Duration

	mu   sync.Mutex
	last Timestamp // l and c of the paper; Node is always node
}

// NewClock returns a clock stamping as node, reading physical time from physical (nil means
// time.Now), with maxOffset as its skew budget (zero or less means DefaultMaxOffset).
func NewClock(node string, physical func() time.Time, maxOffset time.Duration) (*Clock, error) {
	if err := ValidNode(node); err != nil {
		return nil, fmt.Errorf("hlc: %w", err)
	}
	if physical == nil {
		physical = time.Now
	}
	if maxOffset <= 0 {
		maxOffset = DefaultMaxOffset
	}
	return &Clock{node: node, physical: physical, maxOffset: maxOffset}, nil
}

// Node is the node identifier the clock stamps.
func (c *Clock) Node() string { return c.node }

// MaxOffset is the clock's skew budget.
func (c *Clock) MaxOffset() time.Duration { return c.maxOffset }

// pt is the physical time in microseconds.
func (c *Clock) pt() int64 { return c.physical().UnixMicro() }

// Now stamps a local or send event (the paper's first rule): the physical part becomes the
// larger of the last one and physical time; the counter increases only when the physical
// part did not.
func (c *Clock) Now() Timestamp {
	c.mu.Lock()
	defer c.mu.Unlock()
	pt := c.pt()
	if pt > c.last.Physical {
		c.last = Timestamp{Physical: pt, Node: c.node}
	} else {
		c.tick(c.last.Logical)
	}
	return c.last
}

// Update stamps a receive event of a message stamped remote (the paper's second rule): the
// result is after both remote and every timestamp the clock gave before. A remote more than
// the skew budget ahead of physical time is refused with ErrOffset and leaves the clock
// unchanged: one host's runaway clock must not drag every other one forward.
func (c *Clock) Update(remote Timestamp) (Timestamp, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pt := c.pt()
	if ahead := remote.Physical - pt; ahead > c.maxOffset.Microseconds() {
		return Timestamp{}, fmt.Errorf("%w: %s is %v ahead, more than the budget of %v",
			ErrOffset, remote, time.Duration(ahead)*time.Microsecond, c.maxOffset)
	}
	switch l := max(c.last.Physical, remote.Physical, pt); {
	case l == c.last.Physical && l == remote.Physical:
		c.tick(max(c.last.Logical, remote.Logical))
	case l == c.last.Physical:
		c.tick(c.last.Logical)
	case l == remote.Physical:
		c.last = Timestamp{Physical: l, Node: c.node}
		c.tick(remote.Logical)
	default:
		c.last = Timestamp{Physical: l, Node: c.node}
	}
	return c.last, nil
}

// tick sets the counter to after+1 at the current physical part; a counter that would pass
// MaxLogical moves the physical part one microsecond on with the counter at zero instead,
// which keeps the order (and the text form's width) at the price of a microsecond of drift.
func (c *Clock) tick(after uint32) {
	if after >= MaxLogical {
		c.last = Timestamp{Physical: c.last.Physical + 1, Node: c.node}
		return
	}
	c.last.Logical, c.last.Node = after+1, c.node
}

// Observe raises the clock to floor without stamping an event, so that every later
// timestamp is after it: a process seeds its clock at startup with the highest timestamp
// the store holds, and never stamps below what an earlier run (or another process with a
// faster clock) has. A floor below the clock changes nothing. No skew budget applies: the
// floor comes from the process's own store.
func (c *Clock) Observe(floor Timestamp) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if floor.Physical > c.last.Physical || floor.Physical == c.last.Physical && floor.Logical > c.last.Logical {
		c.last = Timestamp{Physical: floor.Physical, Logical: floor.Logical, Node: c.node}
	}
}
