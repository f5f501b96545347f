package cluster

import "testing"

// TestParseStat: the process group and CPU ticks are read after the command name, which
// may hold spaces and parentheses.
func TestParseStat(t *testing.T) {
	line := []byte("4242 (postgres: wal (writer)) S 4200 4200 4200 0 -1 4194560 120 0 0 0 37 12 0 0 20 0 1 0 9 0 0\n")
	pg, ticks, ok := parseStat(line)
	if !ok || pg != 4200 || ticks != 49 {
		t.Fatalf("parseStat = %d, %d, %v; want 4200, 49, true", pg, ticks, ok)
	}
	if _, _, ok := parseStat([]byte("4242 (truncated")); ok {
		t.Fatal("a line without its closing parenthesis was read")
	}
	if _, _, ok := parseStat([]byte("1 (x) S 0 1")); ok {
		t.Fatal("a short line was read")
	}
}
