package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// startPostgres makes the kit's own PostgreSQL cluster (initdb, once) and starts it as
// process "postgres", or takes the external server's URL.
func (c *Cluster) startPostgres(ctx context.Context) error {
	if c.opts.PostgresURL != "" {
		pg, err := parsePG(c.opts.PostgresURL)
		if err != nil {
			return err
		}
		c.pg = pg
		c.admin = c.opts.PostgresURL
		return os.MkdirAll(filepath.Join(c.state, "logs"), 0o755)
	}
	bin, err := pgBinDir(c.opts.PGBin)
	if err != nil {
		return err
	}
	cred, err := postgresUser()
	if err != nil {
		return err
	}
	dir := filepath.Join(c.state, "postgres")
	data := filepath.Join(dir, "data")
	if c.opts.Fresh {
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(c.state, "logs"), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if cred != nil {
		// The postgres user must reach its directory and write the log beside the others.
		if err := os.Chmod(c.state, 0o755); err != nil {
			return err
		}
		for _, d := range []string{dir, filepath.Join(c.state, "logs")} {
			if err := os.Chown(d, int(cred.Uid), int(cred.Gid)); err != nil {
				return fmt.Errorf("chown %s to postgres: %w", d, err)
			}
		}
	}
	port := c.ports[portPostgres]
	c.pg = &pgAccess{host: "127.0.0.1", port: strconv.Itoa(port), user: "postgres", query: map[string][]string{"sslmode": {"disable"}}}
	c.admin = c.pg.url("postgres")
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); err != nil {
		c.logf("initdb %s", data)
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-N", "-E", "UTF8", "--locale=C")
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("initdb: %w\n%s", err, out)
		}
	}
	// SIGINT is PostgreSQL's fast shutdown; its SIGTERM would wait for every client to leave.
	p := &proc{name: "postgres", binary: filepath.Join(bin, "postgres"), dir: dir, cred: cred, stopSig: syscall.SIGINT,
		// The postmaster in the foreground, so that its process group is the kit's to kill;
		// max_connections covers Temporal's pools (four services each with its own) and every
		// sw4rm process's.
		args: []string{"-D", data, "-p", strconv.Itoa(port), "-c", "listen_addresses=127.0.0.1",
			"-c", "unix_socket_directories=" + dir, "-c", "max_connections=300", "-c", "fsync=" + onOff(c.opts.Fsync)},
		env: []string{"PATH=" + os.Getenv("PATH"), "LANG=C"},
	}
	p.ready = func(*proc, string) (bool, error) { return c.pgReady() }
	c.add(p)
	c.logf("starting PostgreSQL on 127.0.0.1:%d", port)
	return c.run(ctx, p)
}

// pgReady reports whether the admin database answers a query.
func (c *Cluster) pgReady() (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.admin)
	if err != nil {
		return false, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	return conn.Ping(ctx) == nil, nil
}

// createDatabases creates the kit's three databases where they are missing (dropping them
// first with Fresh).
func (c *Cluster) createDatabases(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.admin)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	for _, db := range []string{c.opts.DBPrefix + "_temporal", c.opts.DBPrefix + "_temporal_visibility", c.opts.DBPrefix + "_sw4rm"} {
		ident := pgx.Identifier{db}.Sanitize()
		if c.opts.Fresh && c.opts.PostgresURL != "" {
			c.logf("dropping database %s", db)
			if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
				return fmt.Errorf("drop database %s: %w", db, err)
			}
		}
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", db).Scan(&exists); err != nil {
			return err
		}
		if exists {
			continue
		}
		c.logf("creating database %s", db)
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
			return fmt.Errorf("create database %s: %w", db, err)
		}
	}
	return nil
}

// hasTable reports whether the database at url has the named table in its public schema.
func hasTable(ctx context.Context, url, table string) (bool, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return false, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var ok bool
	err = conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", "public."+table).Scan(&ok)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return false, err
	}
	return ok, nil
}

// onOff is a PostgreSQL boolean setting's value.
func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
