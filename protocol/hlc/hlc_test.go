package hlc

import (
	"errors"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"
)

// fakeTime is a settable physical clock.
type fakeTime struct{ t time.Time }

func (f *fakeTime) now() time.Time      { return f.t }
func (f *fakeTime) add(d time.Duration) { f.t = f.t.Add(d) }
func newFake(sec int64) *fakeTime       { return &fakeTime{t: time.Unix(sec, 0)} }
func mustClock(t *testing.T, node string, f *fakeTime, budget time.Duration) *Clock {
	t.Helper()
	c, err := NewClock(node, f.now, budget)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestStringParse(t *testing.T) {
	tests := []struct {
		in   string
		want Timestamp
		text string // String() of the parsed value
	}{
		{"1725552000.000001.node-a", Timestamp{1725552000, 1, "node-a"}, "0000001725552000.000001.node-a"},
		{"1725552000000000.000000.n", Timestamp{1725552000000000, 0, "n"}, "1725552000000000.000000.n"},
		{"0000001725552000.999999.web-1:42", Timestamp{1725552000, 999999, "web-1:42"}, "0000001725552000.999999.web-1:42"},
		{"1.2.a_b", Timestamp{1, 2, "a_b"}, "0000000000000001.000002.a_b"},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			continue
		}
		if got.String() != tt.text {
			t.Errorf("String(%+v) = %q, want %q", got, got.String(), tt.text)
		}
		if back, err := Parse(got.String()); err != nil || back != got {
			t.Errorf("round trip of %q = %+v, %v", got.String(), back, err)
		}
	}
	for _, bad := range []string{
		"", "garbage", "1725552000.1", "1725552000..node", ".1.node", "1725552000.1.",
		"-1.0.n", "1e3.0.n", "12345678901234567.0.n", "1.1234567.n", "1.0.node.with.dots",
		"1.0.node a", "1.0." + strings.Repeat("x", MaxNodeLen+1), " 1.0.n", "1.0.n\n",
	} {
		if _, err := Parse(bad); !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) error = %v, want ErrSyntax", bad, err)
		}
	}
	if (Timestamp{}).String() != "" {
		t.Error("zero Timestamp's String is not empty")
	}
}

// TestTextOrderIsCausalOrder: byte order of String equals Compare, the property SQL ORDER BY
// and max() on the text column rely on.
func TestTextOrderIsCausalOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	nodes := []string{"a", "b", "node-a", "node-b", "z9"}
	ts := make([]Timestamp, 500)
	for i := range ts {
		ts[i] = Timestamp{Physical: r.Int64N(MaxPhysical), Logical: uint32(r.IntN(int(MaxLogical) + 1)), Node: nodes[r.IntN(len(nodes))]}
		if i%3 == 0 && i > 0 { // many equal physical parts, so the logical part and node decide
			ts[i].Physical = ts[i-1].Physical
		}
	}
	for i := range ts {
		for j := range ts {
			byText := strings.Compare(ts[i].String(), ts[j].String())
			// Nodes of different lengths may order differently by text, but only as the tie
			// breaker of equal physical and logical parts, which causality never relies on.
			if ts[i].Physical == ts[j].Physical && ts[i].Logical == ts[j].Logical {
				continue
			}
			if byText != ts[i].Compare(ts[j]) {
				t.Fatalf("text order of %s and %s is %d, Compare says %d", ts[i], ts[j], byText, ts[i].Compare(ts[j]))
			}
		}
	}
}

func TestClockInvariants(t *testing.T) {
	const budget = 5 * time.Second
	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"monotonic with a frozen physical clock", func(t *testing.T) {
			f := newFake(1725552000)
			c := mustClock(t, "a", f, budget)
			prev := c.Now()
			for range 1000 {
				next := c.Now()
				if !prev.Before(next) || prev.String() >= next.String() {
					t.Fatalf("%s not before %s", prev, next)
				}
				prev = next
			}
		}},
		{"physical part follows physical time", func(t *testing.T) {
			f := newFake(1725552000)
			c := mustClock(t, "a", f, budget)
			c.Now()
			c.Now()
			f.add(time.Millisecond)
			if got := c.Now(); got.Physical != f.t.UnixMicro() || got.Logical != 0 {
				t.Fatalf("after physical time moved on, Now = %+v, want physical %d logical 0", got, f.t.UnixMicro())
			}
		}},
		{"clock going backwards", func(t *testing.T) {
			f := newFake(1725552000)
			c := mustClock(t, "a", f, budget)
			before := c.Now()
			f.add(-10 * time.Second)
			for range 10 {
				got := c.Now()
				if !before.Before(got) {
					t.Fatalf("after the physical clock went back, %s is not after %s", got, before)
				}
				if got.Physical != before.Physical {
					t.Fatalf("physical part went %d → %d; want it held", before.Physical, got.Physical)
				}
				before = got
			}
		}},
		{"causality across a send", func(t *testing.T) {
			// The sender's clock is 2 s ahead of the receiver's: the receive event still orders
			// after the send, and the receiver's next local event after that.
			fa, fb := newFake(1725552002), newFake(1725552000)
			a, b := mustClock(t, "node-a", fa, budget), mustClock(t, "node-b", fb, budget)
			send := a.Now()
			recv, err := b.Update(send)
			if err != nil {
				t.Fatal(err)
			}
			if !send.Before(recv) || recv.Node != "node-b" {
				t.Fatalf("receive %s does not follow send %s", recv, send)
			}
			if next := b.Now(); !recv.Before(next) {
				t.Fatalf("local event %s does not follow receive %s", next, recv)
			}
			// And back: a's receive of b's reply follows it although a's own clock never saw
			// b's events.
			reply := b.Now()
			back, err := a.Update(reply)
			if err != nil || !reply.Before(back) {
				t.Fatalf("a's receive %s (%v) does not follow b's reply %s", back, err, reply)
			}
		}},
		{"receive merges equal physical parts", func(t *testing.T) {
			f := newFake(1725552000)
			c := mustClock(t, "b", f, budget)
			local := c.Now()
			remote := Timestamp{Physical: local.Physical, Logical: 7, Node: "a"}
			got, err := c.Update(remote)
			if err != nil || got.Physical != local.Physical || got.Logical != 8 {
				t.Fatalf("Update(%s) after %s = %s, %v; want logical 8", remote, local, got, err)
			}
		}},
		{"bounded drift from physical time", func(t *testing.T) {
			// However many events and remote timestamps within the budget, the physical part
			// stays within the budget of the largest physical time seen.
			r := rand.New(rand.NewPCG(3, 4))
			f := newFake(1725552000)
			c := mustClock(t, "a", f, budget)
			for range 5000 {
				var got Timestamp
				if r.IntN(2) == 0 {
					got = c.Now()
				} else {
					ahead := time.Duration(r.Int64N(int64(budget)))
					var err error
					if got, err = c.Update(Timestamp{Physical: f.t.Add(ahead).UnixMicro(), Logical: uint32(r.IntN(10)), Node: "r"}); err != nil {
						t.Fatal(err)
					}
				}
				if drift := time.Duration(got.Physical-f.t.UnixMicro()) * time.Microsecond; drift < 0 || drift > budget {
					t.Fatalf("drift %v outside [0, %v]", drift, budget)
				}
				f.add(time.Duration(r.IntN(1000)) * time.Microsecond)
			}
		}},
		{"remote beyond the budget is refused", func(t *testing.T) {
			f := newFake(1725552000)
			c := mustClock(t, "a", f, budget)
			before := c.Now()
			far := Timestamp{Physical: f.t.Add(budget + time.Millisecond).UnixMicro(), Node: "r"}
			if _, err := c.Update(far); !errors.Is(err, ErrOffset) {
				t.Fatalf("Update(%s) error = %v, want ErrOffset", far, err)
			}
			if got := c.Now(); got.Physical != before.Physical || got.Logical != before.Logical+1 {
				t.Fatalf("a refused Update moved the clock: %s after %s", got, before)
			}
			edge := Timestamp{Physical: f.t.Add(budget).UnixMicro(), Node: "r"}
			if _, err := c.Update(edge); err != nil {
				t.Fatalf("Update at the budget: %v", err)
			}
		}},
		{"restart seeded from a floor", func(t *testing.T) {
			// A process restarted on a host whose clock is behind what an earlier run stored
			// never stamps below that floor.
			f := newFake(1725552000)
			floor := Timestamp{Physical: f.t.Add(30 * time.Second).UnixMicro(), Logical: 4, Node: "old"}
			c := mustClock(t, "new", f, budget)
			c.Observe(floor)
			c.Observe(Timestamp{Physical: 1, Node: "lower"}) // a lower floor changes nothing
			prev := floor
			for range 100 {
				got := c.Now()
				if !prev.Before(got) || got.Node != "new" {
					t.Fatalf("%s not after %s", got, prev)
				}
				prev = got
			}
			f.add(time.Minute)
			if got := c.Now(); got.Physical != f.t.UnixMicro() {
				t.Fatalf("once physical time passed the floor, Now = %s", got)
			}
		}},
		{"logical overflow", func(t *testing.T) {
			f := newFake(1725552000)
			c := mustClock(t, "a", f, budget)
			c.Observe(Timestamp{Physical: f.t.UnixMicro(), Logical: MaxLogical - 1, Node: "x"})
			a := c.Now()
			b := c.Now()
			if a.Logical != MaxLogical || b.Physical != a.Physical+1 || b.Logical != 0 {
				t.Fatalf("overflow: %s then %s; want logical %d then physical+1 logical 0", a, b, MaxLogical)
			}
			if !a.Before(b) || a.String() >= b.String() {
				t.Fatalf("overflow broke the order: %s, %s", a, b)
			}
			got, err := c.Update(Timestamp{Physical: b.Physical, Logical: MaxLogical, Node: "r"})
			if err != nil || got.Physical != b.Physical+1 || got.Logical != 0 {
				t.Fatalf("receive at MaxLogical = %s, %v", got, err)
			}
		}},
		{"concurrent stamps are unique", func(t *testing.T) {
			c, err := NewClock("a", nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			out := make(chan string, 4000)
			done := make(chan struct{})
			for range 4 {
				go func() {
					for range 1000 {
						out <- c.Now().String()
					}
					done <- struct{}{}
				}()
			}
			for range 4 {
				<-done
			}
			close(out)
			var all []string
			for s := range out {
				all = append(all, s)
			}
			sort.Strings(all)
			for i := 1; i < len(all); i++ {
				if all[i] == all[i-1] {
					t.Fatalf("duplicate stamp %s", all[i])
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, tt.run)
	}
}

func TestNewClockRefusesBadNode(t *testing.T) {
	for _, node := range []string{"", "a.b", "a b", strings.Repeat("n", MaxNodeLen+1)} {
		if _, err := NewClock(node, nil, 0); err == nil {
			t.Errorf("NewClock(%q) accepted", node)
		}
	}
}
