package cluster

import (
	"bufio"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// The kit gives Temporal at least what the compose deployment's dynamic config file does,
// with the same values.
func TestDynamicConfigCoversDeployFile(t *testing.T) {
	f, err := os.Open("../deploy/temporal-dynamicconfig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kit := DynamicConfig()
	var key string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "":
		case !strings.HasPrefix(line, " "):
			key = strings.TrimSuffix(line, ":")
		case strings.HasPrefix(strings.TrimSpace(line), "- value:"):
			want := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "- value:"))
			got, ok := kit[key]
			if !ok {
				t.Errorf("%s: in deploy/temporal-dynamicconfig.yaml, not in DynamicConfig", key)
			} else if s := strconvAny(got); s != want {
				t.Errorf("%s: DynamicConfig has %s, the deploy file %s", key, s, want)
			}
		}
	}
	if key == "" {
		t.Fatal("no key read from deploy/temporal-dynamicconfig.yaml")
	}
}

func strconvAny(v any) string {
	switch v := v.(type) {
	case int:
		return strconv.Itoa(v)
	case string:
		return v
	case bool:
		return strconv.FormatBool(v)
	}
	return ""
}

func TestParsePG(t *testing.T) {
	a, err := parsePG("postgres://u:p%40ss@db.example:6543/postgres?sslmode=require")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := a.url("x_sw4rm"), "postgres://u:p%40ss@db.example:6543/x_sw4rm?sslmode=require"; got != want {
		t.Errorf("url = %s, want %s", got, want)
	}
	a, err = parsePG("postgres://127.0.0.1/postgres")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := a.url("d"), "postgres://postgres@127.0.0.1:5432/d?sslmode=disable"; got != want {
		t.Errorf("url = %s, want %s", got, want)
	}
	if _, err := parsePG("mysql://x"); err == nil {
		t.Error("a mysql URL was taken")
	}
}

// The balancer spreads connections over the backends in turn and skips one that is down.
func TestBalancerSkipsDeadBackend(t *testing.T) {
	serve := func(name string) net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_, _ = io.WriteString(c, name)
				_ = c.Close()
			}
		}()
		return l
	}
	a, b := serve("a"), serve("b")
	defer a.Close()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	_ = dead.Close()
	lb, err := newBalancer("127.0.0.1:0", func() []string { return []string{a.Addr().String(), deadAddr, b.Addr().String()} })
	if err != nil {
		t.Fatal(err)
	}
	defer lb.close()
	read := func() string {
		c, err := net.Dial("tcp", lb.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, _ := io.ReadAll(c)
		return string(s)
	}
	got := map[string]int{}
	for range 6 {
		got[read()]++
	}
	if got["a"] == 0 || got["b"] == 0 || got["a"]+got["b"] != 6 {
		t.Errorf("answers %v, want both backends and nothing else", got)
	}
	_ = b.Close()
	for range 3 {
		if s := read(); s != "a" {
			t.Errorf("with b down, got %q", s)
		}
	}
}
