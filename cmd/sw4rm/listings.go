package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/proto/directorypb"
)

// The listings of the CLI — `sw4rm agents`, `sw4rm tasks`, `sw4rm dag runs` and `sw4rm tools
// calls` — are thin clients of the DirectoryService extension: the server reads its store
// and Temporal's visibility, and decides what the caller may see (an operator everything,
// an agent its own work). Each prints an aligned table, or with --json the response as
// protojson.

// directoryDialer dials DirectoryService for one command; the returned func closes the
// connection.
type directoryDialer = func(*cobra.Command) (directorypb.DirectoryServiceClient, context.Context, func(), error)

// directoryClient is the directoryDialer of a command group's operator flags.
func directoryClient(of *operatorFlags) directoryDialer {
	return func(cmd *cobra.Command) (directorypb.DirectoryServiceClient, context.Context, func(), error) {
		conn, ctx, err := of.dial(cmd)
		if err != nil {
			return nil, nil, nil, err
		}
		return directorypb.NewDirectoryServiceClient(conn), ctx, func() { _ = conn.Close() }, nil
	}
}

// listing runs one listing: dial, call, then print the response as a table or as JSON.
func listing[R proto.Message](client directoryDialer, asJSON *bool, call func(context.Context, directorypb.DirectoryServiceClient) (R, error), table func(io.Writer, R)) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		c, ctx, done, err := client(cmd)
		if err != nil {
			return err
		}
		defer done()
		resp, err := call(ctx, c)
		if err != nil {
			return err
		}
		if *asJSON {
			b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(resp)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), string(b))
			return err
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		table(tw, resp)
		return tw.Flush()
	}
}

// newAgentsCmd builds `sw4rm agents`: the registered agents with their lifecycle state.
func newAgentsCmd() *cobra.Command {
	var of operatorFlags
	var state, capability string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "agents [--state STATE] [--capability CAP] [--json]",
		Short: "List the registered agents: lifecycle state, capabilities, last heartbeat (§8, §14)",
		Args:  cobra.NoArgs,
		RunE: listing(directoryClient(&of), &asJSON,
			func(ctx context.Context, c directorypb.DirectoryServiceClient) (*directorypb.ListAgentsResponse, error) {
				return c.ListAgents(ctx, &directorypb.ListAgentsRequest{State: strings.ToUpper(state), Capability: capability})
			},
			func(w io.Writer, resp *directorypb.ListAgentsResponse) {
				fmt.Fprintln(w, "AGENT\tNAME\tSTATE\tCAPABILITIES\tREGISTERED\tLAST HEARTBEAT")
				for _, a := range resp.GetAgents() {
					d := a.GetAgent()
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", d.GetAgentId(), dash(d.GetName()), a.GetState(),
						dash(strings.Join(d.GetCapabilities(), ",")), when(a.GetRegisteredAt()), when(a.GetLastHeartbeat()))
				}
			}),
	}
	cmd.Flags().StringVar(&state, "state", "", "only agents in this lifecycle state, e.g. RUNNABLE, RUNNING, WAITING")
	cmd.Flags().StringVar(&capability, "capability", "", "only agents that declare this capability")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the response as JSON")
	of.register(cmd)
	return cmd
}

// newTasksCmd builds `sw4rm tasks`: the activity buffer, what agents do and did.
func newTasksCmd() *cobra.Command {
	var of operatorFlags
	var agent, state, task string
	var limit uint32
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "tasks [--agent ID] [--state STATE] [--task ID] [--json]",
		Short: "List tasks from the activity buffer: active ones, then the recently ended (§10)",
		Long: "List the activity buffer's entries: the active ones, oldest first, then the ended ones each agent keeps, " +
			"most recently ended first. An operator sees every agent's; an agent only its own. " +
			"--agent takes agent/<id> as the Temporal UI shows it, --task task/<id>.",
		Args: cobra.NoArgs,
		RunE: listing(directoryClient(&of), &asJSON,
			func(ctx context.Context, c directorypb.DirectoryServiceClient) (*directorypb.ListTasksResponse, error) {
				return c.ListTasks(ctx, &directorypb.ListTasksRequest{AgentId: agentIDs.bare(agent), State: strings.ToLower(state),
					TaskId: taskIDs.bare(task), Limit: limit})
			},
			func(w io.Writer, resp *directorypb.ListTasksResponse) {
				fmt.Fprintln(w, "AGENT\tTASK\tSTATE\tCREATED\tENDED\tWAITING ON\tWORKTREE\tDESCRIPTION")
				for _, e := range resp.GetTasks() {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.GetAgentId(), e.GetTaskId(), e.GetState(), when(e.GetCreatedAt()),
						when(e.GetCompletedAt()), dash(e.GetWaitingOn()), dash(worktreeOf(e)), dash(clip(dlqOneLine(e.GetDescription()), 60)))
				}
			}),
	}
	cmd.Flags().StringVar(&agent, "agent", "", "only this agent's tasks")
	cmd.Flags().StringVar(&state, "state", "", "only tasks in this state: active, completed, failed, cancelled or unknown")
	cmd.Flags().StringVar(&task, "task", "", "only this task")
	cmd.Flags().Uint32Var(&limit, "limit", 0, "at most this many (0 = server default, 100; at most 1000)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the response as JSON")
	of.register(cmd)
	return cmd
}

// worktreeOf is where a task works: repository, worktree and branch, those that are set.
func worktreeOf(e *directorypb.TaskEntry) string {
	var parts []string
	for _, p := range []string{e.GetRepoId(), e.GetWorktreeId(), e.GetBranch()} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "/")
}

// newDAGRunsCmd builds `sw4rm dag runs`: the runs of DAG workflows.
func newDAGRunsCmd(client directoryDialer) *cobra.Command {
	var prefix, state string
	var limit uint32
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "runs [--state STATE] [--prefix WORKFLOW_ID_PREFIX] [--json]",
		Short: "List DAG runs, open ones first: state, Temporal status, start and close",
		Long: "List the runs of DAG workflows from Temporal's visibility store (a run that just started or changed may show a moment late). " +
			"--prefix keeps the workflows whose id starts with it; dag/<prefix>, as the Temporal UI shows run ids, works too. " +
			"An operator sees every run; an agent the runs of the workflows it defined.",
		Args: cobra.NoArgs,
		RunE: listing(client, &asJSON,
			func(ctx context.Context, c directorypb.DirectoryServiceClient) (*directorypb.ListDAGRunsResponse, error) {
				return c.ListDAGRuns(ctx, &directorypb.ListDAGRunsRequest{WorkflowIdPrefix: dagIDs.bare(prefix), State: strings.ToUpper(state), Limit: limit})
			},
			func(w io.Writer, resp *directorypb.ListDAGRunsResponse) {
				fmt.Fprintln(w, "WORKFLOW\tSTATE\tSTATUS\tSTARTED\tCLOSED\tRUN ID")
				for _, r := range resp.GetRuns() {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.GetWorkflowId(), dash(r.GetState()), r.GetExecutionStatus(),
						when(r.GetStartedAt()), when(r.GetClosedAt()), r.GetRunId())
				}
			}),
	}
	cmd.Flags().StringVar(&prefix, "prefix", "", "only workflows whose id starts with this")
	cmd.Flags().StringVar(&state, "state", "", "only runs in this state: RUNNING, WAITING, COMPLETED or FAILED")
	cmd.Flags().Uint32Var(&limit, "limit", 0, "at most this many (0 = server default, 100; at most 1000)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the response as JSON")
	return cmd
}

// newToolsCmd builds `sw4rm tools calls`: the tool calls and how they ended.
func newToolsCmd() *cobra.Command {
	var of operatorFlags
	tools := &cobra.Command{
		Use:   "tools",
		Short: "Look at tool calls (§18)",
	}
	var agent, caller, provider, toolName, state string
	var limit uint32
	var asJSON bool
	calls := &cobra.Command{
		Use:   "calls [--agent ID | --caller CALLER] [--provider ID] [--tool NAME] [--state STATE] [--json]",
		Short: "List tool calls, most recently made first: caller, tool, state, error code, frames",
		Long: "List tool calls with how each ended. An operator sees every call; an agent only its own. " +
			"--agent takes agent/<id> as the Temporal UI shows it; --caller the caller as recorded " +
			"(agent:<id>, operator:<name> or anonymous).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if agent != "" && caller != "" {
				return fmt.Errorf("--agent and --caller both name the caller: give one")
			}
			if agent != "" {
				caller = "agent:" + agentIDs.bare(agent)
			}
			return listing(directoryClient(&of), &asJSON,
				func(ctx context.Context, c directorypb.DirectoryServiceClient) (*directorypb.ListToolCallsResponse, error) {
					return c.ListToolCalls(ctx, &directorypb.ListToolCallsRequest{Caller: caller, ProviderId: provider, ToolName: toolName,
						State: strings.ToLower(state), Limit: limit})
				},
				func(w io.Writer, resp *directorypb.ListToolCallsResponse) {
					fmt.Fprintln(w, "CALL\tCALLER\tTOOL\tSTATE\tCODE\tFRAMES\tBYTES\tCREATED\tMESSAGE")
					for _, c := range resp.GetCalls() {
						fmt.Fprintf(w, "%s\t%s\t%s/%s\t%s\t%s\t%d\t%d\t%s\t%s\n", c.GetCallId(), c.GetCaller(), c.GetProviderId(), c.GetToolName(),
							c.GetState(), dash(c.GetErrorCode()), c.GetFrames(), c.GetBytes(), when(c.GetCreatedAt()), dash(clip(dlqOneLine(c.GetMessage()), 60)))
					}
				})(cmd, args)
		},
	}
	calls.Flags().StringVar(&agent, "agent", "", "only calls made by this agent")
	calls.Flags().StringVar(&caller, "caller", "", "only calls made by this caller: agent:<id>, operator:<name> or anonymous")
	calls.Flags().StringVar(&provider, "provider", "", "only calls to this provider")
	calls.Flags().StringVar(&toolName, "tool", "", "only calls to this tool")
	calls.Flags().StringVar(&state, "state", "", "only calls in this state: running, ok, error or cancelled")
	calls.Flags().Uint32Var(&limit, "limit", 0, "at most this many (0 = server default, 100; at most 1000)")
	calls.Flags().BoolVar(&asJSON, "json", false, "print the response as JSON")
	of.register(tools)
	tools.AddCommand(calls)
	return tools
}

// when formats a listing's time in UTC to the second, "-" when unset.
func when(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}

// clip keeps a table cell to at most n runes, marking a cut with "…".
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
