package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgCluster is a PostgreSQL cluster the suite creates itself (initdb into a temp dir, on a
// free port of 127.0.0.1), so the shared server on 5432 is never touched, and stops with
// `pg_ctl stop -m immediate` — PostgreSQL's crash: no checkpoint, recovery from the WAL at
// the next start.
type pgCluster struct {
	t    testing.TB
	dir  string // owned by the user PostgreSQL runs as
	data string
	port int
	log  string
}

// newCluster initialises and starts a cluster; it is stopped and removed when the test ends.
func newCluster(t testing.TB) *pgCluster {
	t.Helper()
	// Not t.TempDir(): that directory is private to the test's user, and PostgreSQL may run
	// as another one (initdb refuses root).
	dir, err := os.MkdirTemp("", "sw4rm-faults-pg-")
	if err != nil {
		t.Fatal(err)
	}
	c := &pgCluster{t: t, dir: dir, data: filepath.Join(dir, "data"), port: freePorts(t, 1)[0], log: filepath.Join(dir, "postgres.log")}
	t.Cleanup(func() {
		c.stopImmediate()
		if t.Failed() {
			t.Logf("postgres log (tail):\n%s", tail(c.log, 20))
		}
		_ = os.RemoveAll(dir)
	})
	if tools.asRoot {
		if err := os.Chown(dir, tools.pgUID, tools.pgGID); err != nil {
			t.Fatalf("chown %s to postgres: %v", dir, err)
		}
	}
	// -N: no fsync at initdb; fsync=off below. An immediate stop is a crash of the server
	// process, not of the machine: what it wrote is in the OS page cache either way.
	if out, err := c.command("initdb", "-D", c.data, "-U", "postgres", "--auth=trust", "-N", "-E", "UTF8", "--locale=C").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	c.start()
	return c
}

// command runs a PostgreSQL program as the cluster's owner.
func (c *pgCluster) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(tools.pgBin, name), args...)
	cmd.Dir = c.dir
	cmd.Env = cleanEnv("PGDATA=" + c.data)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if tools.asRoot {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(tools.pgUID), Gid: uint32(tools.pgGID)}
	}
	return cmd
}

// URL is the cluster's connection URL.
func (c *pgCluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// start starts the server and waits until it accepts connections (pg_ctl -w).
func (c *pgCluster) start() {
	c.t.Helper()
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories=%s -c fsync=off -c max_connections=200", c.port, c.dir)
	cmd := c.command("pg_ctl", "start", "-w", "-t", "60", "-D", c.data, "-l", c.log, "-o", opts)
	if out, err := cmd.CombinedOutput(); err != nil {
		c.t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, tail(c.log, 20))
	}
	if err := waitFor(30*time.Second, 100*time.Millisecond, c.ready); err != nil {
		c.t.Fatalf("PostgreSQL on port %d does not answer:\n%s", c.port, tail(c.log, 20))
	}
}

// ready reports whether a query succeeds.
func (c *pgCluster) ready() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		return false
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx) == nil
}

// stopImmediate is `pg_ctl stop -m immediate`: every backend is killed at once, nothing is
// checkpointed, and the next start recovers from the WAL.
func (c *pgCluster) stopImmediate() {
	out, err := c.command("pg_ctl", "stop", "-m", "immediate", "-w", "-t", "30", "-D", c.data).CombinedOutput()
	if err != nil && c.running() {
		c.t.Errorf("pg_ctl stop -m immediate: %v\n%s", err, out)
	}
}

// running reports whether the postmaster of the cluster is alive.
func (c *pgCluster) running() bool {
	b, err := os.ReadFile(filepath.Join(c.data, "postmaster.pid"))
	if err != nil {
		return false
	}
	var pid int
	if _, err := fmt.Sscanf(string(b), "%d", &pid); err != nil || pid <= 0 {
		return false
	}
	return syscall.Kill(pid, 0) == nil
}

// unaudited returns how many of the message ids have no message.admitted row in the audit log
// (§19), as an operator would check with psql. The audit rows are written behind by each
// process, so it waits up to timeout for them.
func (c *pgCluster) unaudited(ids []string, timeout time.Duration) (int, error) {
	missing, last := -1, error(nil)
	_ = waitFor(timeout, 200*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, c.URL())
		if err != nil {
			last = err
			return false
		}
		defer conn.Close(context.Background())
		last = conn.QueryRow(ctx, `SELECT count(*) FROM unnest($1::text[]) AS m(id)
			WHERE NOT EXISTS (SELECT 1 FROM audit_events a WHERE a.message_id = m.id AND a.type = 'message.admitted')`, ids).Scan(&missing)
		return last == nil && missing == 0
	})
	if missing < 0 {
		return 0, last
	}
	return missing, nil
}

func (c *pgCluster) String() string { return "postgres(127.0.0.1:" + strconv.Itoa(c.port) + ")" }
