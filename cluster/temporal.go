package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// DynamicConfig is the dynamic config the kit gives Temporal besides Options.DynamicConfig:
// what SW4RM needs of a Temporal cluster that Temporal's defaults do not give.
//
//   - history.transferProcessorMaxPollRPS 1000: each history shard's transfer queue, which
//     hands a signalled workflow's next task to matching, polls 20 times a second by
//     default, so a signal may wait 50 ms before its workflow sees it; SW4RM's scheduler
//     aims at preempting within 50 ms (docs/benchmarks.md, "Temporal's transfer queue").
//     The same value as deploy/temporal-dynamicconfig.yaml and `make dev`.
//   - frontend.namespaceRPS.visibility 100: visibility calls (the console's run lists, the
//     open-DAG-runs gauge every sw4rm process keeps) are limited to 10 a second per
//     namespace and frontend by default, which a handful of sw4rm processes reach; the dev
//     server raises it to 100 too.
func DynamicConfig() map[string]any {
	return map[string]any{
		"history.transferProcessorMaxPollRPS": 1000,
		"frontend.namespaceRPS.visibility":    100,
	}
}

// startTemporal sets up Temporal's schema, writes its config files, starts it as process
// "temporal", registers the namespace and SW4RM's search attributes.
func (c *Cluster) startTemporal(ctx context.Context) error {
	if c.opts.TemporalServer == "" || c.opts.SQLTool == "" {
		return errors.New("temporal-server or temporal-sql-tool not found: run `make cluster-tools` (they go to $HOME/.cache/sw4rm/bin) or set Options.TemporalServer and Options.SQLTool")
	}
	for _, db := range []struct{ name, schema string }{
		{c.opts.DBPrefix + "_temporal", "postgresql/v12/temporal"},
		{c.opts.DBPrefix + "_temporal_visibility", "postgresql/v12/visibility"},
	} {
		if err := c.setupSchema(ctx, db.name, db.schema); err != nil {
			return err
		}
	}
	root := filepath.Join(c.state, "temporal")
	if err := os.MkdirAll(filepath.Join(root, "config"), 0o755); err != nil {
		return err
	}
	dyn := filepath.Join(root, "dynamicconfig.yaml")
	if err := os.WriteFile(dyn, []byte(c.dynamicConfigYAML()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "config", "development.yaml"), []byte(c.temporalConfigYAML(dyn)), 0o644); err != nil {
		return err
	}
	p := &proc{name: "temporal", binary: c.opts.TemporalServer, dir: root,
		args: []string{"--root", root, "--config", "config", "--env", "development", "--allow-no-auth", "start"},
		env:  []string{"PATH=" + os.Getenv("PATH")},
	}
	p.ready = func(*proc, string) (bool, error) { return c.temporalReady() }
	c.add(p)
	c.logf("starting Temporal (%d history shards) on %s", c.opts.HistoryShards, c.TemporalAddr())
	if err := c.run(ctx, p); err != nil {
		return err
	}
	return c.setupNamespace(ctx)
}

// setupSchema creates Temporal's tables in db with temporal-sql-tool, from the schema
// compiled into the tool (--schema-name): versioning tables once, then every update up to
// the tool's version, which is a no-op on an up-to-date database.
func (c *Cluster) setupSchema(ctx context.Context, db, schema string) error {
	has, err := hasTable(ctx, c.pg.url(db), "schema_version")
	if err != nil {
		return fmt.Errorf("database %s: %w", db, err)
	}
	base := []string{"--plugin", "postgres12", "--ep", c.pg.host, "-p", c.pg.port, "-u", c.pg.user, "--db", db}
	if c.pg.password != "" {
		base = append(base, "--pw", c.pg.password)
	}
	steps := [][]string{{"update-schema", "--schema-name", schema}}
	if !has {
		steps = append([][]string{{"setup-schema", "-v", "0.0"}}, steps...)
	}
	for _, step := range steps {
		c.logf("temporal-sql-tool %s (%s)", strings.Join(step, " "), db)
		cmd := exec.CommandContext(ctx, c.opts.SQLTool, slices.Concat(base, step)...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("temporal-sql-tool %s on %s: %w\n%s", strings.Join(step, " "), db, err, out)
		}
	}
	return nil
}

// dynamicConfigYAML renders DynamicConfig with Options.DynamicConfig over it, in Temporal's
// file format (every key a list of constrained values; here one, unconstrained).
func (c *Cluster) dynamicConfigYAML() string {
	m := DynamicConfig()
	for k, v := range c.opts.DynamicConfig {
		m[k] = v
	}
	var b strings.Builder
	b.WriteString("# Written by the sw4rm cluster kit (package cluster, DynamicConfig).\n")
	for _, k := range sortedKeys(m) {
		v := m[k]
		if s, ok := v.(string); ok {
			v = strconv.Quote(s)
		}
		fmt.Fprintf(&b, "%s:\n  - value: %v\n", k, v)
	}
	return b.String()
}

// temporalConfigYAML is temporal-server's static config: PostgreSQL persistence and
// visibility, every service in one process on the kit's ports, Prometheus metrics.
func (c *Cluster) temporalConfigYAML(dynPath string) string {
	pg := c.pg
	store := func(db string, conns int) string {
		return fmt.Sprintf(`      sql:
        pluginName: postgres12
        databaseName: %q
        connectAddr: %q
        connectProtocol: tcp
        user: %q
        password: %q
        maxConns: %d
        maxIdleConns: %d
        maxConnLifetime: 1h
`, db, pg.host+":"+pg.port, pg.user, pg.password, conns, conns)
	}
	svc := func(name string, grpcOff, memberOff int, http bool) string {
		s := fmt.Sprintf("  %s:\n    rpc:\n      grpcPort: %d\n      membershipPort: %d\n      bindOnLocalHost: true\n",
			name, c.ports[portTemporal+grpcOff], c.ports[portTemporal+memberOff])
		if http {
			s += fmt.Sprintf("      httpPort: %d\n", c.ports[portTemporal+1])
		}
		return s
	}
	return fmt.Sprintf(`# Written by the sw4rm cluster kit (package cluster).
log:
  stdout: true
  level: warn

persistence:
  defaultStore: default
  visibilityStore: visibility
  numHistoryShards: %d
  datastores:
    default:
%s    visibility:
%s
global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: 127.0.0.1
  metrics:
    prometheus:
      framework: tally
      timerType: histogram
      listenAddress: %q

services:
%s%s%s%s
clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: active
  currentClusterName: active
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: frontend
      rpcAddress: %q

dcRedirectionPolicy:
  policy: noop

dynamicConfigClient:
  filepath: %q
  pollInterval: 10s
`, c.opts.HistoryShards,
		store(c.opts.DBPrefix+"_temporal", 10), store(c.opts.DBPrefix+"_temporal_visibility", 5),
		c.hostPort(portTemporalProm),
		svc("frontend", 0, 5, true), svc("history", 2, 6, false), svc("matching", 3, 7, false), svc("worker", 4, 8, false),
		c.TemporalAddr(), dynPath)
}

// temporalClient dials the frontend for namespace ns.
func (c *Cluster) temporalClient(ctx context.Context, ns string) (client.Client, error) {
	return client.DialContext(ctx, client.Options{HostPort: c.TemporalAddr(), Namespace: ns,
		Logger: tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))})
}

// temporalReady reports whether the frontend answers and its system namespace exists (the
// server creates it when it starts on an empty database).
func (c *Cluster) temporalReady() (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	tc, err := c.temporalClient(ctx, "temporal-system")
	if err != nil {
		return false, err
	}
	defer tc.Close()
	_, err = tc.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: "temporal-system"})
	return err == nil, err
}

// setupNamespace registers SW4RM's namespace (if missing) with the retention, adds SW4RM's
// search attributes and waits until the frontend accepts a workflow that carries them.
// sw4rm adds missing attributes on start too, but a workflow it starts at once could then
// be refused until the frontend's namespace cache catches up; here that wait happens once,
// before any sw4rm process starts.
func (c *Cluster) setupNamespace(ctx context.Context) error {
	ns := c.opts.Namespace
	tc, err := c.temporalClient(ctx, ns)
	if err != nil {
		return err
	}
	defer tc.Close()
	_, err = tc.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: ns, Description: "SW4RM (cluster kit)", WorkflowExecutionRetentionPeriod: durationpb.New(c.opts.Retention),
	})
	var exists *serviceerror.NamespaceAlreadyExists
	switch {
	case errors.As(err, &exists):
		c.logf("namespace %s exists", ns)
	case err != nil:
		return fmt.Errorf("register namespace %s: %w", ns, err)
	default:
		c.logf("namespace %s registered, retention %s", ns, c.opts.Retention)
	}
	// A new namespace reaches every service's cache within a few seconds.
	var last error
	deadline := time.Now().Add(c.opts.ReadyTimeout)
	for time.Now().Before(deadline) {
		if last = c.addSearchAttributes(ctx, tc); last == nil {
			break
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	if last != nil {
		return fmt.Errorf("search attributes in namespace %s: %w", ns, last)
	}
	for time.Now().Before(deadline) {
		if last = probe(ctx, tc, c.opts.TaskQueue); last == nil {
			c.logf("search attributes usable in namespace %s", ns)
			return nil
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("a workflow with SW4RM's search attributes is still refused in namespace %s: %w", ns, last)
}

// addSearchAttributes adds those of workflows.SearchAttributes the namespace lacks.
func (c *Cluster) addSearchAttributes(ctx context.Context, tc client.Client) error {
	existing, err := tc.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: c.opts.Namespace})
	if err != nil {
		return err
	}
	missing := workflows.SearchAttributes()
	for name := range existing.GetCustomAttributes() {
		delete(missing, name)
	}
	if len(missing) == 0 {
		return nil
	}
	_, err = tc.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: c.opts.Namespace, SearchAttributes: missing})
	var exists *serviceerror.AlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return err
	}
	c.logf("search attributes added: %s", strings.Join(sortedKeys(missing), ", "))
	return nil
}

// probe starts a workflow that sets every SW4RM search attribute and terminates it: it
// fails while the frontend does not know them yet.
func probe(ctx context.Context, tc client.Client, taskQueue string) error {
	var sas []temporal.SearchAttributeUpdate
	for name, typ := range workflows.SearchAttributes() {
		switch typ {
		case enumspb.INDEXED_VALUE_TYPE_KEYWORD:
			sas = append(sas, temporal.NewSearchAttributeKeyKeyword(name).ValueSet("probe"))
		case enumspb.INDEXED_VALUE_TYPE_BOOL:
			sas = append(sas, temporal.NewSearchAttributeKeyBool(name).ValueSet(false))
		case enumspb.INDEXED_VALUE_TYPE_KEYWORD_LIST:
			sas = append(sas, temporal.NewSearchAttributeKeyKeywordList(name).ValueSet([]string{"probe"}))
		}
	}
	id := "sw4rm-cluster-probe-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: taskQueue + "-cluster-probe",
		TypedSearchAttributes: temporal.NewSearchAttributes(sas...)}, "sw4rm-cluster-probe")
	if err != nil {
		return err
	}
	return tc.TerminateWorkflow(ctx, id, run.GetRunID(), "cluster kit probe")
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// serving reports whether the gRPC health service at addr answers SERVING, in plaintext or,
// for a process given SW4RM_TLS_* settings, over TLS (unverified: the kit only asks whether
// its own child is up).
func serving(addr string) (bool, error) {
	ok, err := servingWith(addr, insecure.NewCredentials())
	if ok {
		return true, nil
	}
	if ok, terr := servingWith(addr, credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})); ok { //nolint:gosec // a readiness probe of the kit's own child
		return true, nil
	} else if terr != nil && err == nil {
		err = terr
	}
	return false, err
}

func servingWith(addr string, creds credentials.TransportCredentials) (bool, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return false, err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return false, err
	}
	return res.GetStatus() == healthpb.HealthCheckResponse_SERVING, nil
}

// healthy reports whether GET /healthz at addr answers 200, over HTTP or (unverified) HTTPS.
// sw4rm serves it once its store, its Temporal client and its roles are up: for a worker,
// once it polls.
func healthy(addr string) (bool, error) {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a readiness probe of the kit's own child
	}}
	var last error
	for _, scheme := range []string{"http", "https"} {
		res, err := client.Get(scheme + "://" + addr + "/healthz")
		if err != nil {
			last = err
			continue
		}
		_ = res.Body.Close()
		if res.StatusCode == http.StatusOK {
			return true, nil
		}
		last = fmt.Errorf("/healthz: %s", res.Status)
	}
	return false, last
}
