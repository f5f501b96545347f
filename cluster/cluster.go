// Package cluster starts a production-shaped SW4RM deployment on one machine, every part a
// separate OS process in a process group of its own with its log under a state directory:
//
//   - PostgreSQL: an external server (Options.PostgresURL) in which the kit creates its own
//     databases, or a cluster of its own made with initdb (process "postgres"), which a test
//     can kill -9 and start again;
//   - a Temporal server (temporal-server, process "temporal"), all its services in one
//     process, on PostgreSQL (plugin postgres12) with several history shards, its schema set
//     up by temporal-sql-tool from the schema embedded in that tool, the dynamic config SW4RM
//     needs, the namespace registered with a retention and SW4RM's search attributes added;
//   - `sw4rm server` processes ("server-1", "server-2", …) behind a TCP round-robin load
//     balancer that runs in the kit's own process, and `sw4rm worker` processes ("worker-1",
//     …), all sharing one SW4RM database, each with its /metrics port.
//
// Start brings it all up and returns a Cluster, through which a test or a person kills
// (Kill), starts (Start), restarts (Restart) or upgrades (Replace) single processes and stops
// everything (Stop). `make cluster` runs it in the foreground (cluster/cmd/sw4rm-cluster);
// docs/deploy.md, "A cluster on one machine", describes the topology.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configure a cluster. The zero value of every field has a working default.
type Options struct {
	// StateDir holds the logs, the Temporal config files and (with a PostgreSQL of the kit's
	// own) the database cluster. Empty: a new temporary directory, removed by Stop. With a
	// PostgreSQL of its own run as the postgres user (the kit runs as root), every directory
	// above it must be searchable by that user (/tmp is).
	StateDir string
	// Fresh starts from nothing: the kit's databases are dropped and created again (an
	// external PostgreSQL), or the state directory's database cluster is removed (its own).
	// Without it an existing state is reused.
	Fresh bool
	// PostgresURL is the URL of an external PostgreSQL server whose user may create
	// databases; the kit creates DBPrefix_temporal, DBPrefix_temporal_visibility and
	// DBPrefix_sw4rm in it. Empty: the kit makes a PostgreSQL cluster of its own with initdb
	// in StateDir and runs it as process "postgres".
	PostgresURL string
	// DBPrefix prefixes the names of the kit's databases; default "sw4rm_cluster".
	DBPrefix string
	// Fsync makes the kit's own PostgreSQL flush its WAL to disk at each commit, as a
	// deployment's does. Off by default: tests only kill processes, and a process crash
	// loses nothing the operating system holds; sizing measures with it on.
	Fsync bool
	// PGBin is the directory of initdb and postgres; default: where PATH finds initdb, else
	// the newest /usr/lib/postgresql/*/bin.
	PGBin string

	// BasePort is the first of the 41 ports the cluster listens on, all on 127.0.0.1: the
	// load balancer at +0, server-i's gRPC at +i and its /metrics at +10+i, worker-i's
	// /metrics at +20+i, Temporal's frontend at +30 (its HTTP API +31, history +32, matching
	// +33, worker +34, their membership ports +35…+38, its Prometheus metrics +39) and the
	// kit's own PostgreSQL at +40; at most 32727, as Temporal keeps membership ports as
	// a smallint. 0 picks free ports below 32768 instead.
	BasePort int
	// Servers and Workers are how many `sw4rm server` and `sw4rm worker` processes run;
	// defaults 2 and 3.
	Servers, Workers int

	// TemporalServer and SQLTool are the paths of temporal-server and temporal-sql-tool;
	// default: $HOME/.cache/sw4rm/bin (where `make cluster` installs them), then PATH.
	TemporalServer, SQLTool string
	// HistoryShards is the number of Temporal history shards; default 4. It is fixed when
	// the Temporal database is created: changing it needs Fresh.
	HistoryShards int
	// Namespace is the Temporal namespace SW4RM runs in, registered by the kit; default
	// "sw4rm".
	Namespace string
	// Retention is the namespace's retention of closed workflows; default 168h, the 7 days sw4rm expects (docs/reliability.md, "Retention").
	Retention time.Duration
	// DynamicConfig adds to, or overrides, the dynamic config the kit gives Temporal
	// (DynamicConfig function); values are strings, numbers or booleans.
	DynamicConfig map[string]any

	// SW4RM is the sw4rm binary every sw4rm process runs unless Binaries names another;
	// default "bin/sw4rm".
	SW4RM string
	// Binaries overrides the binary of single processes, by name ("server-1": an older
	// sw4rm, say).
	Binaries map[string]string
	// TaskQueue is SW4RM's task queue; default "sw4rm".
	TaskQueue string
	// Env is extra environment of every sw4rm process, "SW4RM_AUTH=required" and the like:
	// authentication, HITL operators and keys, the ACL file. Each process is otherwise given
	// only PATH, HOME and the settings the kit sets (Temporal address, namespace, task queue,
	// database URL, listen addresses), so that an older binary is not handed settings it
	// does not know.
	Env []string
	// ProcEnv is extra environment of single sw4rm processes, by name; it comes after Env.
	ProcEnv map[string][]string

	// ReadyTimeout bounds the wait for each process to become ready; default 2 minutes.
	ReadyTimeout time.Duration
	// StopGrace is how long a graceful stop (Restart, Replace, Stop) waits after SIGTERM
	// before SIGKILL; default 45 s, longer than a worker's SW4RM_WORKER_STOP_TIMEOUT of 30 s
	// as in the deploy files, so that a stopping worker lets its activities finish.
	StopGrace time.Duration
	// Logf, if set, is told of each step of Start and Stop.
	Logf func(format string, args ...any)
}

// The offsets from Options.BasePort (its comment has the layout); at most 9 servers and 9
// workers fit.
const (
	portLB           = 0
	portServerGRPC   = 0
	portServerHTTP   = 10
	portWorkerHTTP   = 20
	portTemporal     = 30
	portTemporalProm = 39
	portPostgres     = 40
	portSpan         = 41
)

// Cluster is a running cluster. Its methods are safe for concurrent use.
type Cluster struct {
	opts     Options
	state    string
	tempDir  bool // StateDir was made by Start, and is removed by Stop
	ports    map[int]int
	admin    string // URL of the PostgreSQL database the kit administers from
	pg       *pgAccess
	lb       *balancer
	procs    map[string]*proc
	order    []string // start order
	stopOnce sync.Once
	mu       sync.Mutex // serialises Start/Kill/Replace of one process against another
}

// Start brings the cluster up: PostgreSQL and the databases, Temporal with its schema,
// namespace and search attributes, the sw4rm servers and workers, and the load balancer;
// it returns when every process is ready. ctx bounds the start only, not the cluster's
// life: Stop ends it. On an error, whatever was started is stopped.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	opts = withDefaults(opts)
	if opts.Servers > 9 || opts.Workers > 9 {
		return nil, errors.New("cluster: at most 9 servers and 9 workers")
	}
	c := &Cluster{opts: opts, state: opts.StateDir, procs: map[string]*proc{}}
	if c.state == "" {
		if c.state, err = os.MkdirTemp("", "sw4rm-cluster-"); err != nil {
			return nil, err
		}
		c.tempDir = true
	}
	if c.state, err = filepath.Abs(c.state); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.state, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if err := c.allocatePorts(); err != nil {
		return nil, err
	}
	if err := c.startPostgres(ctx); err != nil {
		return nil, err
	}
	if err := c.createDatabases(ctx); err != nil {
		return nil, err
	}
	if err := c.startTemporal(ctx); err != nil {
		return nil, err
	}
	if err := c.startSW4RM(ctx); err != nil {
		return nil, err
	}
	c.lb, err = newBalancer(c.Addr(), c.ServerAddrs)
	if err != nil {
		return nil, fmt.Errorf("load balancer: %w", err)
	}
	c.logf("cluster up: gRPC %s (load balancer over %s), Temporal %s, namespace %s", c.Addr(), strings.Join(c.ServerAddrs(), ", "), c.TemporalAddr(), c.opts.Namespace)
	return c, nil
}

func withDefaults(o Options) Options {
	if o.DBPrefix == "" {
		o.DBPrefix = "sw4rm_cluster"
	}
	if o.Servers == 0 {
		o.Servers = 2
	}
	if o.Workers == 0 {
		o.Workers = 3
	}
	if o.HistoryShards == 0 {
		o.HistoryShards = 4
	}
	if o.Namespace == "" {
		o.Namespace = "sw4rm"
	}
	if o.Retention == 0 {
		o.Retention = 7 * 24 * time.Hour
	}
	if o.SW4RM == "" {
		o.SW4RM = filepath.Join("bin", "sw4rm")
	}
	if o.TaskQueue == "" {
		o.TaskQueue = "sw4rm"
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 2 * time.Minute
	}
	if o.StopGrace == 0 {
		o.StopGrace = 45 * time.Second
	}
	if o.TemporalServer == "" {
		o.TemporalServer = findTool("temporal-server")
	}
	if o.SQLTool == "" {
		o.SQLTool = findTool("temporal-sql-tool")
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return o
}

// FindTool returns the path of a tool `make cluster` installs (temporal-server,
// temporal-sql-tool): $HOME/.cache/sw4rm/bin first, then PATH; empty if neither has it.
func FindTool(name string) string { return findTool(name) }

func findTool(name string) string {
	if home, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(home, ".cache", "sw4rm", "bin", name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return ""
}

func (c *Cluster) logf(format string, args ...any) { c.opts.Logf(format, args...) }

// maxMembershipPort is the highest port Temporal's membership ports may have: the
// cluster_membership table keeps them as a smallint.
const maxMembershipPort = 32767

// allocatePorts fixes every port: BasePort plus its offset, or a free port each, taken
// below maxMembershipPort (the kernel's ephemeral ports, which port 0 hands out, are above).
func (c *Cluster) allocatePorts() error {
	c.ports = map[int]int{}
	if c.opts.BasePort != 0 {
		if c.opts.BasePort+portSpan-1 > maxMembershipPort {
			return fmt.Errorf("cluster: base port %d too high: Temporal keeps its membership ports (+35…+38) as a smallint, so the base must be at most %d",
				c.opts.BasePort, maxMembershipPort-portSpan+1)
		}
		for off := range portSpan {
			c.ports[off] = c.opts.BasePort + off
		}
		return nil
	}
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	// Probing from a random start spreads concurrent clusters apart; the listeners held
	// until the end keep one cluster from taking a port twice.
	port := 20000 + rand.IntN(10000)
	for off := 0; off < portSpan; port++ {
		if port > maxMembershipPort {
			return errors.New("cluster: no free ports below 32768")
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		ls = append(ls, l)
		c.ports[off] = port
		off++
	}
	return nil
}

func (c *Cluster) hostPort(off int) string { return "127.0.0.1:" + strconv.Itoa(c.ports[off]) }

// Addr is the load balancer's gRPC address, the one address agents dial.
func (c *Cluster) Addr() string { return c.hostPort(portLB) }

// ServerAddrs are the gRPC addresses of the sw4rm servers, server-1 first.
func (c *Cluster) ServerAddrs() []string {
	addrs := make([]string, c.opts.Servers)
	for i := range addrs {
		addrs[i] = c.hostPort(portServerGRPC + i + 1)
	}
	return addrs
}

// MetricsURLs maps every process that serves Prometheus metrics (each sw4rm process, and
// "temporal") to the URL of its /metrics.
func (c *Cluster) MetricsURLs() map[string]string {
	m := map[string]string{"temporal": "http://" + c.hostPort(portTemporalProm) + "/metrics"}
	for i := 1; i <= c.opts.Servers; i++ {
		m["server-"+strconv.Itoa(i)] = "http://" + c.hostPort(portServerHTTP+i) + "/metrics"
	}
	for i := 1; i <= c.opts.Workers; i++ {
		m["worker-"+strconv.Itoa(i)] = "http://" + c.hostPort(portWorkerHTTP+i) + "/metrics"
	}
	return m
}

// Connections counts, per server name, the client connections the load balancer pipes to
// it now; a gRPC client holds one connection for all its calls.
func (c *Cluster) Connections() map[string]int {
	n := map[string]int{}
	if c.lb == nil {
		return n
	}
	per := c.lb.perBackend()
	for i, addr := range c.ServerAddrs() {
		n["server-"+strconv.Itoa(i+1)] = per[addr]
	}
	return n
}

// TemporalAddr is the Temporal frontend's gRPC address.
func (c *Cluster) TemporalAddr() string { return c.hostPort(portTemporal) }

// TemporalHTTPAddr is the Temporal frontend's HTTP API address.
func (c *Cluster) TemporalHTTPAddr() string { return c.hostPort(portTemporal + 1) }

// Namespace is the Temporal namespace SW4RM runs in.
func (c *Cluster) Namespace() string { return c.opts.Namespace }

// TaskQueue is SW4RM's Temporal task queue.
func (c *Cluster) TaskQueue() string { return c.opts.TaskQueue }

// StateDir is the directory of the logs and the kit's files.
func (c *Cluster) StateDir() string { return c.state }

// LogPath is the log file of the named process; every run of it appends there after a
// "---- name run N start" line.
func (c *Cluster) LogPath(name string) string { return filepath.Join(c.state, "logs", name+".log") }

// DatabaseURL is the URL of SW4RM's database, the one every sw4rm process shares.
func (c *Cluster) DatabaseURL() string { return c.pg.url(c.opts.DBPrefix + "_sw4rm") }

// TemporalDatabaseURL is the URL of Temporal's database.
func (c *Cluster) TemporalDatabaseURL() string { return c.pg.url(c.opts.DBPrefix + "_temporal") }

// VisibilityDatabaseURL is the URL of Temporal's visibility database.
func (c *Cluster) VisibilityDatabaseURL() string {
	return c.pg.url(c.opts.DBPrefix + "_temporal_visibility")
}

// Procs names the cluster's processes in start order: postgres (with a PostgreSQL of its
// own), temporal, server-1…, worker-1….
func (c *Cluster) Procs() []string { return slices.Clone(c.order) }

// Running reports whether the named process runs.
func (c *Cluster) Running(name string) bool {
	p, ok := c.procs[name]
	return ok && !p.exited()
}

// Pid is the process id of the named process, 0 if it does not run.
func (c *Cluster) Pid(name string) int {
	if p, ok := c.procs[name]; ok {
		return p.pid()
	}
	return 0
}

// Binary is the binary the named process runs (or ran last).
func (c *Cluster) Binary(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.procs[name]; ok {
		return p.binary
	}
	return ""
}

func (c *Cluster) proc(name string) (*proc, error) {
	p, ok := c.procs[name]
	if !ok {
		return nil, fmt.Errorf("cluster: %q: %w (have %s)", name, errUnknown, strings.Join(c.order, ", "))
	}
	return p, nil
}

// Kill is kill -9 of the named process's group: no shutdown of any kind. It returns once
// the process is gone; Start runs it again.
func (c *Cluster) Kill(name string) error {
	p, err := c.proc(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p.kill()
	c.logf("%s killed (SIGKILL)", name)
	return nil
}

// Start runs the named process again, with the same configuration, ports and binary, and
// waits until it is ready. It fails if the process runs.
func (c *Cluster) Start(ctx context.Context, name string) error {
	p, err := c.proc(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.run(ctx, p)
}

// Restart stops the named process gracefully (SIGTERM, then SIGKILL after
// Options.StopGrace) and starts it again.
func (c *Cluster) Restart(ctx context.Context, name string) error {
	return c.Replace(ctx, name, "")
}

// Replace is one step of a rolling upgrade: it stops the named process gracefully, waits
// for it to exit and starts it again running binary (the same binary if empty), with the
// same configuration and ports, and waits until it is ready. The graceful stop is SIGTERM
// (PostgreSQL: SIGINT, its fast shutdown), then SIGKILL after Options.StopGrace.
func (c *Cluster) Replace(ctx context.Context, name, binary string) error {
	p, err := c.proc(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !p.stop(c.opts.StopGrace) {
		c.logf("%s did not stop within %s of SIGTERM and was killed", name, c.opts.StopGrace)
	}
	if binary != "" {
		p.binary = binary
	}
	return c.run(ctx, p)
}

// run starts p and waits until it is ready or ctx ends.
func (c *Cluster) run(ctx context.Context, p *proc) error {
	marker, err := p.start()
	if err != nil {
		return err
	}
	if err := p.waitReady(ctx, marker, c.opts.ReadyTimeout); err != nil {
		return err
	}
	c.logf("%s ready (pid %d, %s)", p.name, p.pid(), p.binary)
	return nil
}

// add registers a process under its name, in start order.
func (c *Cluster) add(p *proc) {
	p.log = c.LogPath(p.name)
	c.procs[p.name] = p
	c.order = append(c.order, p.name)
}

// Stop stops everything in reverse start order: the load balancer, the workers and servers
// (SIGTERM, each given Options.StopGrace), Temporal, PostgreSQL. A temporary state directory is removed.
// Stop is idempotent.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		if c.lb != nil {
			c.lb.close()
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		// The sw4rm processes in parallel, then the rest one by one.
		var wg sync.WaitGroup
		for _, name := range c.order {
			if strings.HasPrefix(name, "server-") || strings.HasPrefix(name, "worker-") {
				p := c.procs[name]
				wg.Go(func() { p.stop(c.opts.StopGrace) })
			}
		}
		wg.Wait()
		for _, name := range slices.Backward(c.order) {
			if p := c.procs[name]; !p.exited() {
				p.stop(c.opts.StopGrace)
			}
		}
		c.logf("cluster stopped")
		if c.tempDir {
			_ = os.RemoveAll(c.state)
		}
	})
}

// Env returns the environment the named sw4rm process is given, for a person or a test
// that wants to run a sw4rm command (`sw4rm dlq list`, say) against the cluster.
func (c *Cluster) Env(name string) []string {
	if p, ok := c.procs[name]; ok {
		return slices.Clone(p.env)
	}
	return nil
}

// sw4rmEnv is the environment of sw4rm process name: PATH and HOME, the kit's settings, then
// Options.Env and Options.ProcEnv[name].
func (c *Cluster) sw4rmEnv(name string, settings ...string) []string {
	env := []string{"PATH=" + os.Getenv("PATH")}
	if h, err := os.UserHomeDir(); err == nil {
		env = append(env, "HOME="+h)
	}
	env = append(env,
		"SW4RM_TEMPORAL_ADDRESS="+c.TemporalAddr(),
		"SW4RM_NAMESPACE="+c.opts.Namespace,
		"SW4RM_TASK_QUEUE="+c.opts.TaskQueue,
		"SW4RM_DATABASE_URL="+c.DatabaseURL(),
	)
	env = append(env, settings...)
	env = append(env, c.opts.Env...)
	return append(env, c.opts.ProcEnv[name]...)
}

// startSW4RM starts the servers, then the workers, each group in parallel.
func (c *Cluster) startSW4RM(ctx context.Context) error {
	var servers, workers []*proc
	for i := 1; i <= c.opts.Servers; i++ {
		name := "server-" + strconv.Itoa(i)
		p := &proc{name: name, binary: c.binary(name), args: []string{"server"}, addr: c.hostPort(portServerGRPC + i),
			metric: "http://" + c.hostPort(portServerHTTP+i) + "/metrics"}
		p.env = c.sw4rmEnv(name, "SW4RM_GRPC_ADDR="+p.addr, "SW4RM_HTTP_ADDR="+c.hostPort(portServerHTTP+i))
		p.ready = func(p *proc, _ string) (bool, error) { return serving(p.addr) }
		c.add(p)
		servers = append(servers, p)
	}
	for i := 1; i <= c.opts.Workers; i++ {
		name := "worker-" + strconv.Itoa(i)
		p := &proc{name: name, binary: c.binary(name), args: []string{"worker"},
			metric: "http://" + c.hostPort(portWorkerHTTP+i) + "/metrics"}
		httpAddr := c.hostPort(portWorkerHTTP + i)
		p.env = c.sw4rmEnv(name, "SW4RM_HTTP_ADDR="+httpAddr)
		p.ready = func(*proc, string) (bool, error) { return healthy(httpAddr) }
		c.add(p)
		workers = append(workers, p)
	}
	// The first server alone first: it applies SW4RM's migrations, which the others would
	// only wait for (they are serialised by a lock), and fails fast on a bad setting.
	c.logf("starting sw4rm: %d servers, %d workers", len(servers), len(workers))
	if err := c.run(ctx, servers[0]); err != nil {
		return err
	}
	return c.runAll(ctx, append(servers[1:], workers...))
}

// runAll starts ps in parallel and waits for all of them.
func (c *Cluster) runAll(ctx context.Context, ps []*proc) error {
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { errs[i] = c.run(ctx, p) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *Cluster) binary(name string) string {
	if b := c.opts.Binaries[name]; b != "" {
		return b
	}
	return c.opts.SW4RM
}

// postgresUser is the account a PostgreSQL of the kit's own runs as when the kit runs as
// root (initdb refuses root): the postgres user's uid and gid.
func postgresUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, the kit's PostgreSQL must run as user postgres: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// pgBinDir finds the directory of initdb and postgres.
func pgBinDir(opt string) (string, error) {
	if opt != "" {
		return opt, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no initdb on PATH or in /usr/lib/postgresql/*/bin: install PostgreSQL, set Options.PGBin, or use an external server (Options.PostgresURL)")
}

// pgAccess is how the kit reaches PostgreSQL: host, port, user and password, from which it
// makes the URL of each database.
type pgAccess struct {
	host, port, user, password string
	query                      url.Values
}

func parsePG(raw string) (*pgAccess, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, fmt.Errorf("PostgreSQL URL %q: want postgres://user[:password]@host:port/db", raw)
	}
	a := &pgAccess{host: u.Hostname(), port: u.Port(), user: u.User.Username(), query: u.Query()}
	a.password, _ = u.User.Password()
	if a.host == "" {
		a.host = "127.0.0.1"
	}
	if a.port == "" {
		a.port = "5432"
	}
	if a.user == "" {
		a.user = "postgres"
	}
	if !a.query.Has("sslmode") {
		a.query.Set("sslmode", "disable")
	}
	return a, nil
}

func (a *pgAccess) url(db string) string {
	u := url.URL{Scheme: "postgres", Host: net.JoinHostPort(a.host, a.port), Path: "/" + db, RawQuery: a.query.Encode()}
	if a.password != "" {
		u.User = url.UserPassword(a.user, a.password)
	} else {
		u.User = url.User(a.user)
	}
	return u.String()
}

// sortedKeys is maps.Keys, sorted, for files the kit writes in a stable order.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
