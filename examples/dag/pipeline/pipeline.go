// Package pipeline is the swarm of the DAG workflow example (§17.7, docs/dag.md): a
// build → {unit-tests, lint} → package → deploy pipeline run by four SDK agents. The builder
// builds an artifact, the checker tests and lints it, the packager packages it once both
// checks passed and the deployer deploys the package; data flows between them through the
// run's workflow_data. Lint finds a problem on its first run, so the run waits with its
// dependents not run; the problem is fixed, ResumeWorkflow re-runs lint and what follows, and
// the run completes with every node that had completed run exactly once.
//
// Run drives it against a server; examples/dag's main and an end-to-end test both call it.
package pipeline

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/workflowpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	pdag "github.com/sw4rm/sw4rm-temporal/protocol/dag"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/sdk/dag"
)

// The pipeline's node ids.
const (
	// NodeBuild builds the artifact from the source named in workflow_data.
	NodeBuild = "build"
	// NodeUnitTests runs the unit tests against the artifact.
	NodeUnitTests = "unit-tests"
	// NodeLint lints the artifact's source; it fails on its first run.
	NodeLint = "lint"
	// NodePackage packages the artifact once both checks passed.
	NodePackage = "package"
	// NodeDeploy deploys the package to the environment named in workflow_data.
	NodeDeploy = "deploy"
)

// Nodes are the pipeline's node ids in pipeline order.
var Nodes = []string{NodeBuild, NodeUnitTests, NodeLint, NodePackage, NodeDeploy}

// The agents' roles: each agent id is its role and the run's suffix.
const (
	roleBuilder  = "builder"
	roleChecker  = "checker"
	rolePackager = "packager"
	roleDeployer = "deployer"
)

// roles are the four agents in registration order.
var roles = []string{roleBuilder, roleChecker, rolePackager, roleDeployer}

// InitialData is the workflow_data the run starts with: what to build and where to deploy.
const InitialData = `{"source":{"repo":"github.com/acme/shop","commit":"9f3c2e1","version":"1.4.2"},"environment":"staging"}`

// lintFinding is what lint reports until the problem is fixed.
const lintFinding = "cmd/shop/main.go:42: exported function Serve has no doc comment"

// lintFailure is how the failed lint's node error reads: the checker's error_code, then its
// reason.
const lintFailure = "FAILED: validation_error: 1 finding: " + lintFinding

// Options tunes Run; the zero value is fine.
type Options struct {
	// Out receives what the agents and the driver print; nil means standard output.
	Out io.Writer
	// Wait bounds each wait for the run (until it waits on the failed node, until it
	// completes); zero means two minutes.
	Wait time.Duration
}

// Result is what Run saw.
type Result struct {
	// WorkflowID is the workflow's id, unique to the run of the example.
	WorkflowID string
	// Version is the version the definition was stored as.
	Version int
	// Agents maps each node to the id of the agent that served it.
	Agents map[string]string
	// Waiting is the run's state while it waited on the failed lint.
	Waiting *workflowpb.WorkflowState
	// Final is the run's state once it completed.
	Final *workflowpb.WorkflowState
	// Runs counts, per node, how many times an agent ran the node's task.
	Runs map[string]int
	// Registered are the agents Run registered, in order; Deregistered those it deregistered
	// when it ended, whether the run behaved or not.
	Registered, Deregistered []string
}

// Definition is the pipeline's definition for workflowID, with its nodes served by the agents
// that agents maps each node to. The mappings make the data flow: build writes /artifact, the
// checks read it and write /checks/*, package reads the artifact and both reports and writes
// /package, deploy reads /package and /environment.
func Definition(workflowID string, agents map[string]string) (*workflowpb.WorkflowDefinition, error) {
	return dag.New(workflowID).
		Node(NodeBuild, agents[NodeBuild]).
		Input("commit", "/source/commit").Input("version", "/source/version").
		Output("artifact", "/artifact").
		Node(NodeUnitTests, agents[NodeUnitTests]).After(NodeBuild).
		Input("artifact", "/artifact").
		Output("", "/checks/unit-tests").
		Node(NodeLint, agents[NodeLint]).After(NodeBuild).
		Input("artifact", "/artifact").
		Output("", "/checks/lint").
		Node(NodePackage, agents[NodePackage]).After(NodeUnitTests, NodeLint).
		Input("artifact", "/artifact").Input("tests", "/checks/unit-tests").Input("lint", "/checks/lint").
		Input("version", "/source/version").
		Output("", "/package").
		Node(NodeDeploy, agents[NodeDeploy]).After(NodePackage).
		Input("package", "/package").Input("environment", "/environment").
		Output("", "/deployment").
		Build()
}

// Artifact is what build produces.
type Artifact struct {
	Name   string `json:"name"`
	Commit string `json:"commit"`
	SHA256 string `json:"sha256"`
}

// TestReport is what unit-tests produces.
type TestReport struct {
	Artifact string `json:"artifact"`
	Passed   int    `json:"passed"`
	Failed   int    `json:"failed"`
}

// LintReport is what lint produces.
type LintReport struct {
	Artifact string   `json:"artifact"`
	Findings []string `json:"findings"`
}

// Package is what package produces.
type Package struct {
	Image  string `json:"image"`
	Digest string `json:"digest"`
}

// Deployment is what deploy produces.
type Deployment struct {
	Environment string `json:"environment"`
	Image       string `json:"image"`
	URL         string `json:"url"`
}

// printer writes one line per call, so that concurrent agents do not interleave.
type printer struct {
	mu  sync.Mutex
	out io.Writer
}

func (p *printer) say(who, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = fmt.Fprintf(p.out, "%-18s %s\n", who, fmt.Sprintf(format, args...))
}

// block writes text as it is.
func (p *printer) block(text string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = io.WriteString(p.out, text)
}

// swarm is the agents' shared bookkeeping.
type swarm struct {
	workflowID string
	p          *printer

	mu   sync.Mutex
	runs map[string]int
	// lintFixed is set once the lint finding has been fixed.
	lintFixed atomic.Bool
}

// ran counts one run of node and returns how many there were.
func (s *swarm) ran(node string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs[node]++
	return s.runs[node]
}

func (s *swarm) counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.runs)
}

// nodeOf recovers the node a task runs from its scope: a DAG task's scope is the resource
// "dag/<workflow_id>/<node_id>" (resource:"…") unless the node's metadata sets another
// (docs/dag.md).
func (s *swarm) nodeOf(scope string) (string, bool) {
	quoted, ok := strings.CutPrefix(scope, "resource:")
	if !ok {
		return "", false
	}
	res, err := strconv.Unquote(quoted)
	if err != nil {
		return "", false
	}
	node, ok := strings.CutPrefix(res, "dag/"+s.workflowID+"/")
	return node, ok && node != ""
}

// handler serves the tasks of the agent id: it decodes the node's input, does the node's work
// and answers its output, which the run maps into workflow_data.
func (s *swarm) handler(id string) sdk.TaskHandler {
	return func(_ context.Context, run *sdk.TaskRun) ([]byte, error) {
		node, ok := s.nodeOf(run.Task().Scope)
		if !ok {
			return nil, fmt.Errorf("task %s (scope %q) is not a node of %s", run.Task().ID, run.Task().Scope, s.workflowID)
		}
		n := s.ran(node)
		var in map[string]json.RawMessage
		if err := json.Unmarshal(run.Task().Params, &in); err != nil {
			return nil, fmt.Errorf("%s: input is not a JSON object: %w", node, err)
		}
		out, err := s.work(id, node, n, in)
		if err != nil {
			s.p.say(id, "%s (run %d): FAILED: %v", node, n, err)
			return nil, err
		}
		return json.Marshal(out)
	}
}

// work does node's work for its run n.
func (s *swarm) work(id, node string, n int, in map[string]json.RawMessage) (any, error) {
	switch node {
	case NodeBuild:
		var commit, version string
		if err := decode(in, "commit", &commit); err != nil {
			return nil, err
		}
		if err := decode(in, "version", &version); err != nil {
			return nil, err
		}
		sum := sha256.Sum256([]byte("shop " + version + " " + commit))
		a := Artifact{Name: "shop-" + version + ".tar.gz", Commit: commit, SHA256: hex.EncodeToString(sum[:])}
		s.p.say(id, "%s (run %d): compiled shop@%s into %s (sha256 %s…)", node, n, commit, a.Name, a.SHA256[:12])
		return map[string]Artifact{"artifact": a}, nil
	case NodeUnitTests:
		var a Artifact
		if err := decode(in, "artifact", &a); err != nil {
			return nil, err
		}
		r := TestReport{Artifact: a.Name, Passed: 128}
		s.p.say(id, "%s (run %d): %d tests passed against %s", node, n, r.Passed, a.Name)
		return r, nil
	case NodeLint:
		var a Artifact
		if err := decode(in, "artifact", &a); err != nil {
			return nil, err
		}
		if !s.lintFixed.Load() {
			// The task fails on its own terms: the artifact did not pass the check. The code
			// says so (validation_error, which §18 names among the failures a provider maps
			// to a code); a plain error would fail it as internal_error, the agent's own bug.
			return nil, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "1 finding: %s", lintFinding)
		}
		s.p.say(id, "%s (run %d): %s@%s is clean", node, n, a.Name, a.Commit)
		return LintReport{Artifact: a.Name, Findings: []string{}}, nil
	case NodePackage:
		var (
			a       Artifact
			tests   TestReport
			lint    LintReport
			version string
		)
		for key, v := range map[string]any{"artifact": &a, "tests": &tests, "lint": &lint, "version": &version} {
			if err := decode(in, key, v); err != nil {
				return nil, err
			}
		}
		if tests.Failed > 0 || len(lint.Findings) > 0 {
			return nil, fmt.Errorf("refusing to package %s: %d failed tests, %d lint findings", a.Name, tests.Failed, len(lint.Findings))
		}
		sum := sha256.Sum256([]byte("image " + a.SHA256))
		pkg := Package{Image: "registry.example.com/acme/shop:" + version, Digest: "sha256:" + hex.EncodeToString(sum[:])}
		s.p.say(id, "%s (run %d): %s (%d tests passed, lint clean) → %s", node, n, a.Name, tests.Passed, pkg.Image)
		return pkg, nil
	case NodeDeploy:
		var (
			pkg Package
			env string
		)
		if err := decode(in, "package", &pkg); err != nil {
			return nil, err
		}
		if err := decode(in, "environment", &env); err != nil {
			return nil, err
		}
		d := Deployment{Environment: env, Image: pkg.Image, URL: "https://" + env + ".shop.example.com"}
		s.p.say(id, "%s (run %d): rolled %s out to %s at %s", node, n, pkg.Image, env, d.URL)
		return d, nil
	}
	return nil, fmt.Errorf("no agent here serves node %q", node)
}

// decode reads the input key into v; a missing input is an error, so that a wrong mapping
// fails the node instead of running it on nothing.
func decode(in map[string]json.RawMessage, key string, v any) error {
	raw, ok := in[key]
	if !ok {
		return fmt.Errorf("input %q is missing", key)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("input %q: %w", key, err)
	}
	return nil
}

// Run registers the four agents at server (host:port), serves the pipeline's nodes with them,
// creates and starts the workflow, waits for lint's failure, fixes it, resumes the run from
// lint and waits for it to complete. It returns an error when the run does not behave as the
// example says: lint not failed with its dependents not run, the run not completed, or a
// completed node run again.
// It is one function on purpose: an example reads top to bottom as the story it tells.
func Run(ctx context.Context, server string, opts Options) (res *Result, err error) {
	if opts.Out == nil {
		opts.Out = os.Stdout
	}
	if opts.Wait <= 0 {
		opts.Wait = 2 * time.Minute
	}
	suffix := uuid.NewString()[:8]
	s := &swarm{workflowID: "release-" + suffix, p: &printer{out: opts.Out}, runs: map[string]int{}}
	res = &Result{WorkflowID: s.workflowID, Agents: map[string]string{}}

	agents := map[string]*sdk.Agent{}
	defer func() {
		// Deregistering needs a ctx even when Run's was cancelled; a deregistration that
		// fails is Run's error, since it leaves the agent behind on the server.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		for _, role := range roles {
			if a := agents[role]; a != nil {
				if derr := a.Deregister(cctx, "dag example finished"); derr != nil {
					err = errors.Join(err, fmt.Errorf("deregister %s: %w", a.ID(), derr))
				} else {
					res.Deregistered = append(res.Deregistered, a.ID())
				}
				_ = a.Close()
			}
		}
	}()
	for _, role := range roles {
		id := role + "-" + suffix
		a, err := sdk.Dial(server, id)
		if err != nil {
			return res, err
		}
		if err := a.Register(ctx, &registrypb.AgentDescriptor{Name: role, Description: "dag example: " + role}); err != nil {
			_ = a.Close()
			return res, fmt.Errorf("register %s (is the server running? `make dev`): %w", id, err)
		}
		agents[role] = a
		res.Registered = append(res.Registered, id)
		s.p.say(id, "registered")
	}
	for node, role := range map[string]string{NodeBuild: roleBuilder, NodeUnitTests: roleChecker, NodeLint: roleChecker,
		NodePackage: rolePackager, NodeDeploy: roleDeployer} {
		res.Agents[node] = agents[role].ID()
	}

	// Serving opens each agent's stream, which makes it RUNNABLE: the scheduler queues a
	// node's task until its agent is, so nothing has to wait for that here.
	sctx, stopServing := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopServing()
		wg.Wait()
	}()
	for _, role := range roles {
		a := agents[role]
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.Serve(sctx, s.handler(a.ID()), nil); err != nil && sctx.Err() == nil {
				s.p.say(a.ID(), "stopped serving: %v", err)
			}
		}()
	}

	def, err := Definition(s.workflowID, res.Agents)
	if err != nil {
		return res, err
	}
	// Any authenticated caller may create and run a workflow; the builder's connection does.
	conn := agents[roleBuilder].ClientConn()
	created, err := dag.Create(ctx, conn, def)
	if err != nil {
		return res, fmt.Errorf("create workflow %s: %w", s.workflowID, err)
	}
	res.Version = created.Version
	s.p.say("driver", "created workflow %s, version %d: build → {unit-tests, lint} → package → deploy", created.WorkflowID, created.Version)
	for _, w := range created.Warnings {
		s.p.say("driver", "warning: %s", w)
	}

	wc := workflowpb.NewWorkflowServiceClient(conn)
	if _, err := wc.StartWorkflow(ctx, &workflowpb.StartWorkflowRequest{WorkflowId: s.workflowID, WorkflowData: InitialData}); err != nil {
		return res, fmt.Errorf("start workflow %s: %w", s.workflowID, err)
	}
	s.p.say("driver", "started run dag/%s with workflow_data %s", s.workflowID, InitialData)

	res.Waiting, err = waitFor(ctx, wc, s.workflowID, dag.RunWaiting, opts.Wait)
	if err != nil {
		return res, err
	}
	s.p.say("driver", "the run is %s:", dag.RunStatus(res.Waiting))
	s.printNodes(res.Waiting, res.Agents)
	if err := s.checkWaiting(res.Waiting); err != nil {
		return res, err
	}
	s.p.say("driver", "sw4rm dag show %s:", s.workflowID)
	s.p.block(pdag.Mermaid(def, statuses(res.Waiting)))

	s.lintFixed.Store(true)
	s.p.say("driver", "the finding is fixed (Serve has its doc comment now); resuming the run from %s", NodeLint)
	if _, err := wc.ResumeWorkflow(ctx, &workflowpb.ResumeWorkflowRequest{WorkflowId: s.workflowID, NodeId: NodeLint}); err != nil {
		return res, fmt.Errorf("resume workflow %s from %s: %w", s.workflowID, NodeLint, err)
	}

	res.Final, err = waitFor(ctx, wc, s.workflowID, dag.RunCompleted, opts.Wait)
	if err != nil {
		return res, err
	}
	res.Runs = s.counts()
	s.p.say("driver", "the run is %s:", dag.RunStatus(res.Final))
	s.printNodes(res.Final, res.Agents)
	var data bytes.Buffer
	if json.Indent(&data, []byte(res.Final.GetWorkflowData()), "    ", "  ") != nil {
		data.Reset()
		data.WriteString(res.Final.GetWorkflowData())
	}
	s.p.say("driver", "workflow_data:")
	s.p.block("    " + data.String() + "\n")
	var runs []string
	for _, node := range Nodes {
		runs = append(runs, fmt.Sprintf("%s=%d", node, res.Runs[node]))
	}
	s.p.say("driver", "task runs per node: %s", strings.Join(runs, " "))
	if err := checkFinal(res.Final, res.Runs); err != nil {
		return res, err
	}
	s.p.say("driver", "done: lint ran twice (failed, then fixed); every other node ran exactly once")
	return res, nil
}

// checkWaiting checks what the run shows while it waits: lint FAILED with a reason, the
// nodes after it PENDING and never run.
func (s *swarm) checkWaiting(st *workflowpb.WorkflowState) error {
	nodes := st.GetNodeStates()
	if l := nodes[NodeLint]; l.GetStatus() != workflowpb.NodeStatus_FAILED || !strings.Contains(l.GetError(), lintFailure) {
		return fmt.Errorf("the run waits, but lint is %s (error %q), not FAILED with the checker's code and reason %q", l.GetStatus(), l.GetError(), lintFailure)
	}
	runs := s.counts()
	for _, node := range []string{NodePackage, NodeDeploy} {
		if got := nodes[node].GetStatus(); got != workflowpb.NodeStatus_PENDING || runs[node] != 0 {
			return fmt.Errorf("%s depends on the failed lint, yet it is %s and ran %d times", node, got, runs[node])
		}
	}
	return nil
}

// checkFinal checks the completed run: every node COMPLETED, lint run twice and every other
// node once, and the deployment in workflow_data.
func checkFinal(st *workflowpb.WorkflowState, runs map[string]int) error {
	for _, node := range Nodes {
		if got := st.GetNodeStates()[node].GetStatus(); got != workflowpb.NodeStatus_COMPLETED {
			return fmt.Errorf("the run completed with %s %s", node, got)
		}
		want := 1
		if node == NodeLint {
			want = 2
		}
		if runs[node] != want {
			return fmt.Errorf("%s ran %d times, want %d", node, runs[node], want)
		}
	}
	var data struct {
		Deployment Deployment `json:"deployment"`
	}
	if err := json.Unmarshal([]byte(st.GetWorkflowData()), &data); err != nil || data.Deployment.URL == "" {
		return fmt.Errorf("workflow_data has no deployment: %s", st.GetWorkflowData())
	}
	return nil
}

// printNodes prints the nodes of st in pipeline order.
func (s *swarm) printNodes(st *workflowpb.WorkflowState, agents map[string]string) {
	for _, node := range Nodes {
		n := st.GetNodeStates()[node]
		line := fmt.Sprintf("  %-10s %-17s %-9s", node, agents[node], n.GetStatus())
		if n.GetError() != "" {
			line += " " + n.GetError()
		}
		s.p.say("", "%s", strings.TrimRight(line, " "))
	}
}

// statuses are the node statuses of st, as the pictures take them.
func statuses(st *workflowpb.WorkflowState) map[string]workflowpb.NodeStatus {
	out := map[string]workflowpb.NodeStatus{}
	for id, n := range st.GetNodeStates() {
		out[id] = n.GetStatus()
	}
	return out
}

// waitFor polls GetWorkflowState until the run's status is want, for at most limit. A run that
// completes while the caller waits for it to wait is an error: the failure did not happen.
func waitFor(ctx context.Context, wc workflowpb.WorkflowServiceClient, id, want string, limit time.Duration) (*workflowpb.WorkflowState, error) {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		resp, err := wc.GetWorkflowState(ctx, &workflowpb.GetWorkflowStateRequest{WorkflowId: id})
		if err != nil {
			return nil, fmt.Errorf("workflow %s state: %w", id, err)
		}
		st := resp.GetState()
		last = dag.RunStatus(st)
		if last == want {
			return st, nil
		}
		if want == dag.RunWaiting && last == dag.RunCompleted {
			return st, fmt.Errorf("workflow %s completed without waiting on a failed node", id)
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return st, fmt.Errorf("workflow %s did not become %s within %s (it is %s; is a worker running? `make dev` runs one)", id, want, limit, last)
		case <-ctx.Done():
			return st, ctx.Err()
		}
	}
}
