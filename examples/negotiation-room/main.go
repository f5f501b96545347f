// Command negotiation-room runs a code-review negotiation room (RFC §17.5) against a running
// SW4RM server: a producer agent submits a Go change as a CODE proposal, three critic agents
// (tests, style, security) receive it on their streams, review it with simple deterministic
// heuristics and vote, and the server's coordinator workflow decides by policy. When the
// decision is REVISION_REQUESTED the producer submits its revision under the same artifact_id
// and waits for the decision on the new version.
//
// Start a server with `make dev`, then run `make example-room` (or
// `go run ./examples/negotiation-room -server host:port`). See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/negotiationroompb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/protocol/voting"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/sdk/room"
)

func main() {
	server := flag.String("server", envOr("SW4RM_SERVER", "localhost:50051"), "SW4RM gRPC address host:port (SW4RM_SERVER)")
	roomID := flag.String("room", envOr("SW4RM_ROOM", "code-review"), "negotiation room id (SW4RM_ROOM)")
	wait := flag.Duration("wait", 2*time.Minute, "how long the producer waits for each decision")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *server, *roomID, *wait)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "\nerror:", err)
		os.Exit(1)
	}
}

// envOr returns the environment variable name, or def when it is unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// console prints whole blocks at once, so concurrent agents do not interleave their lines.
type console struct{ mu sync.Mutex }

func (c *console) print(lines ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range lines {
		fmt.Println(l)
	}
}

var out console

// member is a registered agent of the run.
type member struct {
	agent      *sdk.Agent
	stream     *sdk.Stream
	registered bool
}

// run is the example: a producer submits an artifact, critics vote, and the room decides.
// It is one function on purpose: an example reads top to bottom as the story it tells.
func run(ctx context.Context, server, roomID string, wait time.Duration) error {
	runID := uuid.NewString()[:8] // ids unique per run, so reruns never collide
	artifactID := "notify-webhook-" + runID
	out.print(
		"SW4RM negotiation room: code review",
		"  server    "+server,
		"  room      "+roomID,
		"  artifact  "+artifactID,
		"")

	// Every agent that joins is deregistered and disconnected on the way out.
	var members []*member
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, m := range members {
			if m.stream != nil {
				m.stream.Close()
			}
			if m.registered {
				_ = m.agent.Deregister(cctx, "negotiation-room example finished")
			}
			_ = m.agent.Close()
		}
	}()
	join := func(id, role string) (*member, error) {
		a, err := sdk.Dial(server, id)
		if err != nil {
			return nil, err
		}
		m := &member{agent: a}
		members = append(members, m)
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err = a.Register(rctx, &registrypb.AgentDescriptor{
			Name: id, Description: "negotiation-room example: " + role, Capabilities: []string{"negotiation-room"},
			CommunicationClass: commonpb.CommunicationClass_STANDARD, ModalitiesSupported: []string{"application/json", "text/x-go"},
		})
		if err != nil {
			if c := status.Code(err); c == codes.Unavailable || c == codes.DeadlineExceeded {
				return nil, fmt.Errorf("cannot reach the SW4RM server at %s (%s).\n"+
					"Start one with `make dev` in another terminal, or point -server / SW4RM_SERVER at a running server", server, status.Convert(err).Message())
			}
			return nil, fmt.Errorf("register %s: %w", id, err)
		}
		m.registered = true
		// Opening the stream makes the agent RUNNABLE and is where the room's envelopes arrive.
		if m.stream, err = a.Receive(ctx); err != nil {
			return nil, fmt.Errorf("open the stream of %s: %w", id, err)
		}
		return m, nil
	}

	// The producer joins first: this is also the reachability check.
	producer, err := join("producer-"+runID, "submits a Go change for review")
	if err != nil {
		return err
	}
	out.print("Agents (registered with the agent SDK, streams open)", fmt.Sprintf("  %-9s %s", "producer", producer.agent.ID()))
	var criticIDs []string
	var wg sync.WaitGroup
	notices := make(chan notice, 64) // decisions the agents received on their streams
	cctx, stopCritics := context.WithCancel(ctx)
	defer func() {
		// Closing the streams ends the agents' receive loops.
		stopCritics()
		for _, m := range members {
			if m.stream != nil {
				m.stream.Close()
			}
		}
		wg.Wait()
	}()
	for _, c := range critics {
		m, err := join("critic-"+c.name+"-"+runID, "critic: "+c.focus)
		if err != nil {
			return err
		}
		criticIDs = append(criticIDs, m.agent.ID())
		out.print(fmt.Sprintf("  %-9s %s  (%s)", c.name, m.agent.ID(), c.focus))
		wg.Add(1)
		go func() {
			defer wg.Done()
			runCritic(cctx, c, m, notices)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		drainProducer(cctx, producer, notices)
	}()

	// The producer's room client talks to the server's NegotiationRoomService.
	client := room.NewWithStore(room.NewServerStore(producer.agent.Conn(), room.WithRoomID(roomID)))
	var last *negotiationroompb.NegotiationDecision
	for version, draft := range drafts {
		p := &negotiationroompb.NegotiationProposal{
			ArtifactType: negotiationroompb.ArtifactType_CODE, ArtifactId: artifactID, ProducerId: producer.agent.ID(),
			Artifact: []byte(draft), ArtifactContentType: "text/x-go", RequestedCritics: criticIDs, NegotiationRoomId: roomID,
		}
		files := splitFiles(draft)
		names := make([]string, len(files))
		for i, f := range files {
			names[i] = f.name
		}
		what := "submits"
		if version > 0 {
			what = "submits its revision of"
		}
		out.print("", fmt.Sprintf("Version %d: the producer %s %s (CODE: %s, %d bytes) for review by %d critics",
			version+1, what, artifactID, strings.Join(names, ", "), len(draft), len(criticIDs)))
		if _, err := client.SubmitProposal(ctx, p); err != nil {
			return fmt.Errorf("submit version %d: %w", version+1, err)
		}
		d, err := client.WaitForDecision(ctx, artifactID, wait)
		if errors.Is(err, room.ErrTimeout) {
			return fmt.Errorf("no decision on %s within %s: %w\n"+
				"(if it was escalated to a human, decide it with `bin/sw4rm hitl list` / `hitl decide`, see docs/hitl.md)", artifactID, wait, err)
		}
		if err != nil {
			return fmt.Errorf("wait for the decision on version %d: %w", version+1, err)
		}
		last = d
		printDecision(version+1, d, awaitNotices(ctx, notices, d))
		if d.GetOutcome() != negotiationroompb.DecisionOutcome_REVISION_REQUESTED {
			break
		}
		if version == len(drafts)-1 {
			out.print("  (the producer has no further revision)")
		}
	}

	// The proposal versions are kept as artifacts in the ActivityService.
	if p, err := client.GetProposal(ctx, artifactID); err != nil {
		out.print("", "GetProposal: "+err.Error())
	} else if p != nil {
		out.print("", fmt.Sprintf("GetProposal (ActivityService, negotiation_id %s): latest version has %d bytes, created %s",
			room.NegotiationID(roomID, artifactID), len(p.GetArtifact()), p.GetCreatedAt().AsTime().Format(time.RFC3339)))
	}
	out.print("",
		fmt.Sprintf("Final outcome: %s", last.GetOutcome()),
		fmt.Sprintf("In the Temporal UI (http://localhost:8233 with `make dev`) open workflow %s:", room.NegotiationID(roomID, artifactID)),
		"one run per version, with the room-vote updates, the room-state query and the PublishProposal/PublishDecision activities.")
	return nil
}

// notice reports that an agent received a decision as a NEGOTIATION envelope.
type notice struct {
	agent   string // "producer" or the critic's short name
	outcome negotiationroompb.DecisionOutcome
}

// awaitNotices waits up to a few seconds for the producer and every critic to receive d on
// their streams (the coordinator sends the final decision to all of them), and lists who did,
// in a fixed order.
func awaitNotices(ctx context.Context, notices <-chan notice, d *negotiationroompb.NegotiationDecision) string {
	want := []string{"producer"}
	for _, c := range critics {
		want = append(want, c.name)
	}
	got := map[string]bool{}
	timeout := time.After(5 * time.Second)
	for len(got) < len(want) {
		select {
		case n := <-notices:
			if n.outcome == d.GetOutcome() {
				got[n.agent] = true
			}
		case <-timeout:
			var have, missing []string
			for _, w := range want {
				if got[w] {
					have = append(have, w)
				} else {
					missing = append(missing, w)
				}
			}
			return strings.Join(have, ", ") + " (not yet: " + strings.Join(missing, ", ") + ")"
		case <-ctx.Done():
			return "(interrupted)"
		}
	}
	return strings.Join(want, ", ")
}

// printDecision shows a decision's outcome, aggregate, reason and who received it.
func printDecision(version int, d *negotiationroompb.NegotiationDecision, receivedBy string) {
	a := d.GetAggregatedScore()
	lines := []string{
		fmt.Sprintf("Decision on version %d", version),
		fmt.Sprintf("  outcome    %s", d.GetOutcome()),
		fmt.Sprintf("  aggregate  weighted_mean %.2f, mean %.2f, min %.1f, max %.1f, std_dev %.2f, votes %d",
			a.GetWeightedMean(), a.GetMean(), a.GetMinScore(), a.GetMaxScore(), a.GetStdDev(), a.GetVoteCount()),
		fmt.Sprintf("  policy     %s", d.GetPolicyVersion()),
		fmt.Sprintf("  reason     %s", d.GetReason()),
		fmt.Sprintf("  sent to    %s (NEGOTIATION envelopes on their streams)", receivedBy),
	}
	out.print(lines...)
}

// runCritic receives the critic's envelopes: each proposal (a NEGOTIATION envelope whose
// payload is the protojson of a NegotiationProposal) is reviewed and voted on; the final
// decision, which the coordinator also sends to the critics, is reported on notices.
func runCritic(ctx context.Context, c critic, m *member, notices chan<- notice) {
	client := room.NewWithStore(room.NewServerStore(m.agent.Conn()))
	for {
		d, err := m.stream.Next()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, io.EOF) {
				out.print(fmt.Sprintf("  [%s] stream ended: %v", c.name, err))
			}
			return
		}
		env := d.Envelope
		if env.GetMessageType() == commonpb.MessageType_NEGOTIATION {
			var p negotiationroompb.NegotiationProposal
			var dec negotiationroompb.NegotiationDecision
			switch {
			case protojson.Unmarshal(env.GetPayload(), &p) == nil && p.GetProducerId() != "":
				vote(ctx, client, c, m.agent.ID(), &p)
			case protojson.Unmarshal(env.GetPayload(), &dec) == nil && dec.GetOutcome() != 0:
				report(ctx, notices, notice{agent: c.name, outcome: dec.GetOutcome()})
			}
		}
		// Confirm after handling, so a crash before the vote gets the proposal redelivered.
		if _, err := d.Confirm(ctx); err != nil && ctx.Err() == nil {
			out.print(fmt.Sprintf("  [%s] confirm delivery: %v", c.name, err))
		}
	}
}

// vote reviews a proposal and submits the critic's vote through the room client.
func vote(ctx context.Context, client *room.Client, c critic, criticID string, p *negotiationroompb.NegotiationProposal) {
	r := c.review(splitFiles(string(p.GetArtifact())))
	v := &negotiationroompb.NegotiationVote{
		ArtifactId: p.GetArtifactId(), CriticId: criticID, Score: r.score, Confidence: r.confidence, Passed: r.passed,
		Strengths: r.strengths, Weaknesses: r.weaknesses, Recommendations: r.recommendations,
		NegotiationRoomId: p.GetNegotiationRoomId(),
	}
	lines := []string{fmt.Sprintf("  [%s] received the proposal; votes score %.1f, confidence %.2f, passed %t",
		c.name, r.score, r.confidence, r.passed)}
	for _, s := range r.strengths {
		lines = append(lines, "      + "+s)
	}
	for _, w := range r.weaknesses {
		lines = append(lines, "      - "+w)
	}
	for _, rec := range r.recommendations {
		lines = append(lines, "      > "+rec)
	}
	out.print(lines...)
	err := client.SubmitVote(ctx, v)
	switch {
	case errors.Is(err, voting.ErrAlreadyVoted):
		out.print(fmt.Sprintf("  [%s] had already voted on this version (the proposal was redelivered)", c.name))
	case err != nil:
		out.print(fmt.Sprintf("  [%s] vote refused: %v", c.name, err))
	}
}

// drainProducer confirms the producer's deliveries (registry notifications, the decisions),
// which keeps its inbound buffer from filling up, and reports the decisions on notices.
func drainProducer(ctx context.Context, m *member, notices chan<- notice) {
	for {
		d, err := m.stream.Next()
		if err != nil {
			return
		}
		var dec negotiationroompb.NegotiationDecision
		if d.Envelope.GetMessageType() == commonpb.MessageType_NEGOTIATION &&
			protojson.Unmarshal(d.Envelope.GetPayload(), &dec) == nil && dec.GetOutcome() != 0 {
			report(ctx, notices, notice{agent: "producer", outcome: dec.GetOutcome()})
		}
		_, _ = d.Confirm(ctx)
	}
}

// report sends n unless ctx ends first.
func report(ctx context.Context, notices chan<- notice, n notice) {
	select {
	case notices <- n:
	case <-ctx.Done():
	}
}
