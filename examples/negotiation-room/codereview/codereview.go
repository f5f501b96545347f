// Package codereview is the swarm of the negotiation room example (RFC §17.5,
// docs/negotiation-room.md): a code review. A producer agent submits a Go change as a CODE
// proposal, three critic agents (tests, style, security) receive it on their streams, review
// it with simple deterministic heuristics and vote, and the server's coordinator workflow
// decides by policy. When the decision is REVISION_REQUESTED the producer submits its
// revision under the same artifact_id and waits for the decision on the new version. Every
// agent is deregistered at the end.
//
// The agents use the agent SDK (sdk) for registration and streams, and the Negotiation Room
// Client (sdk/room, backed by room.ServerStore) for proposals, votes and decisions. Run drives
// it against a server; examples/negotiation-room's main and an end-to-end test both call it.
package codereview

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
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

// DefaultRoom is the room Run uses when Options.Room is empty.
const DefaultRoom = "code-review"

// Options tunes Run; the zero value is fine.
type Options struct {
	// Out receives what the agents and the producer print; nil means standard output.
	Out io.Writer
	// Room is the negotiation room id; empty means DefaultRoom.
	Room string
	// Wait bounds the producer's wait for each decision; zero means two minutes.
	Wait time.Duration
}

// Result is what Run saw.
type Result struct {
	// Suffix is the run's unique suffix, part of every agent id and of the artifact id.
	Suffix string
	// Room is the negotiation room id and ArtifactID the reviewed artifact's id.
	Room, ArtifactID string
	// Producer is the producer's agent id.
	Producer string
	// Critics are the critics' agent ids by short name (tests, style, security).
	Critics map[string]string
	// Agents are the ids of every agent Run registered, in the order they joined; Run
	// deregisters each of them before it returns.
	Agents []string
	// Versions are the versions the producer submitted, in order.
	Versions []*Version
	// Latest is the proposal GetProposal read back from the ActivityService at the end.
	Latest *negotiationroompb.NegotiationProposal
	// Outcome is the last decision's outcome.
	Outcome negotiationroompb.DecisionOutcome
}

// Version is one version of the artifact: what the producer submitted, what the critics
// voted and what the coordinator decided.
type Version struct {
	// Number is the version, from 1.
	Number int
	// Proposal is the proposal the producer submitted.
	Proposal *negotiationroompb.NegotiationProposal
	// Votes are the votes the critics' room clients submitted and the server accepted, by
	// critic short name.
	Votes map[string]*negotiationroompb.NegotiationVote
	// Refused are the critics' votes the server refused, by critic short name: the error,
	// or "already voted" for a proposal delivered again after a vote.
	Refused map[string]string
	// Decision is the final decision WaitForDecision returned.
	Decision *negotiationroompb.NegotiationDecision
	// ReceivedBy are the agents (producer, then the critics' short names) that received the
	// decision as a NEGOTIATION envelope on their streams within a few seconds.
	ReceivedBy []string
}

// printer prints whole blocks at once, so concurrent agents do not interleave their lines.
type printer struct {
	mu  sync.Mutex
	out io.Writer
}

func (p *printer) print(lines ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range lines {
		_, _ = fmt.Fprintln(p.out, l)
	}
}

// member is a registered agent of the run.
type member struct {
	agent      *sdk.Agent
	stream     *sdk.Stream
	registered bool
}

// ballots collects the critics' votes as they are cast; the producer takes them after each
// decision (a critic handles its stream's envelopes in order, so its vote is in before it
// reports receiving the decision).
type ballots struct {
	mu      sync.Mutex
	votes   map[string]*negotiationroompb.NegotiationVote
	refused map[string]string
}

func (b *ballots) cast(critic string, v *negotiationroompb.NegotiationVote, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.votes == nil {
		b.votes, b.refused = map[string]*negotiationroompb.NegotiationVote{}, map[string]string{}
	}
	switch {
	case errors.Is(err, voting.ErrAlreadyVoted):
		b.refused[critic] = "already voted"
	case err != nil:
		b.refused[critic] = err.Error()
	default:
		b.votes[critic] = v
	}
}

// take returns the votes cast since the last take.
func (b *ballots) take() (map[string]*negotiationroompb.NegotiationVote, map[string]string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	votes, refused := b.votes, b.refused
	if votes == nil {
		votes, refused = map[string]*negotiationroompb.NegotiationVote{}, map[string]string{}
	}
	b.votes, b.refused = nil, nil
	return votes, refused
}

// Run registers a producer and three critics at server (host:port), has the producer submit
// its drafts to the room until one is not sent back for revision, and deregisters every
// agent before it returns. It returns an error when the server cannot be reached, a proposal
// is refused or a decision does not come within Options.Wait; which decisions the server's
// policy takes is the Result's to tell.
//
// It is one function on purpose: an example reads top to bottom as the story it tells.
func Run(ctx context.Context, server string, opts Options) (res *Result, err error) {
	if opts.Out == nil {
		opts.Out = os.Stdout
	}
	if opts.Room == "" {
		opts.Room = DefaultRoom
	}
	if opts.Wait <= 0 {
		opts.Wait = 2 * time.Minute
	}
	out := &printer{out: opts.Out}
	roomID := opts.Room
	runID := uuid.NewString()[:8] // ids unique per run, so reruns never collide
	artifactID := "notify-webhook-" + runID
	res = &Result{Suffix: runID, Room: roomID, ArtifactID: artifactID, Critics: map[string]string{}}
	out.print(
		"SW4RM negotiation room: code review",
		"  server    "+server,
		"  room      "+roomID,
		"  artifact  "+artifactID,
		"")

	// Every agent that joins is stopped, deregistered and disconnected on the way out, with a
	// ctx of its own: Run's may be cancelled already.
	var members []*member
	var wg sync.WaitGroup
	agentsCtx, stopAgents := context.WithCancel(ctx)
	defer func() {
		// Closing the streams ends the agents' receive loops; they must be over before the
		// agents are deregistered, or a loop would report the stream's end as an error.
		stopAgents()
		for _, m := range members {
			if m.stream != nil {
				m.stream.Close()
			}
		}
		wg.Wait()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		for _, m := range members {
			if m.registered {
				if derr := m.agent.Deregister(cctx, "negotiation-room example finished"); derr != nil {
					out.print(fmt.Sprintf("could not deregister %s: %v", m.agent.ID(), derr))
				}
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
		res.Agents = append(res.Agents, id)
		// Opening the stream makes the agent RUNNABLE and is where the room's envelopes arrive.
		if m.stream, err = a.Receive(agentsCtx); err != nil {
			return nil, fmt.Errorf("open the stream of %s: %w", id, err)
		}
		return m, nil
	}

	// The producer joins first: this is also the reachability check.
	producer, err := join("producer-"+runID, "submits a Go change for review")
	if err != nil {
		return res, err
	}
	res.Producer = producer.agent.ID()
	out.print("Agents (registered with the agent SDK, streams open)", fmt.Sprintf("  %-9s %s", "producer", producer.agent.ID()))
	var criticIDs []string
	notices := make(chan notice, 64) // decisions the agents received on their streams
	var cast ballots
	for _, c := range critics {
		m, err := join("critic-"+c.name+"-"+runID, "critic: "+c.focus)
		if err != nil {
			return res, err
		}
		criticIDs = append(criticIDs, m.agent.ID())
		res.Critics[c.name] = m.agent.ID()
		out.print(fmt.Sprintf("  %-9s %s  (%s)", c.name, m.agent.ID(), c.focus))
		wg.Add(1)
		go func() {
			defer wg.Done()
			runCritic(agentsCtx, out, c, m, notices, &cast)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		drainProducer(agentsCtx, producer, notices)
	}()

	// The producer's room client talks to the server's NegotiationRoomService.
	client := room.NewWithStore(room.NewServerStore(producer.agent.ClientConn(), room.WithRoomID(roomID)))
	var last *negotiationroompb.NegotiationDecision
	for i, draft := range Drafts {
		p := &negotiationroompb.NegotiationProposal{
			ArtifactType: negotiationroompb.ArtifactType_CODE, ArtifactId: artifactID, ProducerId: producer.agent.ID(),
			Artifact: []byte(draft), ArtifactContentType: "text/x-go", RequestedCritics: criticIDs, NegotiationRoomId: roomID,
		}
		v := &Version{Number: i + 1, Proposal: p}
		res.Versions = append(res.Versions, v)
		files := splitFiles(draft)
		names := make([]string, len(files))
		for i, f := range files {
			names[i] = f.name
		}
		what := "submits"
		if i > 0 {
			what = "submits its revision of"
		}
		out.print("", fmt.Sprintf("Version %d: the producer %s %s (CODE: %s, %d bytes) for review by %d critics",
			v.Number, what, artifactID, strings.Join(names, ", "), len(draft), len(criticIDs)))
		if _, err := client.SubmitProposal(ctx, p); err != nil {
			return res, fmt.Errorf("submit version %d: %w", v.Number, err)
		}
		d, err := client.WaitForDecision(ctx, artifactID, opts.Wait)
		if errors.Is(err, room.ErrTimeout) {
			return res, fmt.Errorf("no decision on %s within %s: %w\n"+
				"(if it was escalated to a human, decide it with `bin/sw4rm hitl list` / `hitl decide`, see docs/hitl.md)", artifactID, opts.Wait, err)
		}
		if err != nil {
			return res, fmt.Errorf("wait for the decision on version %d: %w", v.Number, err)
		}
		last, v.Decision = d, d
		res.Outcome = d.GetOutcome()
		received, missing := awaitNotices(ctx, notices, d)
		v.ReceivedBy = received
		v.Votes, v.Refused = cast.take()
		printDecision(out, v.Number, d, received, missing)
		if d.GetOutcome() != negotiationroompb.DecisionOutcome_REVISION_REQUESTED {
			break
		}
		if i == len(Drafts)-1 {
			out.print("  (the producer has no further revision)")
		}
	}

	// The proposal versions are kept as artifacts in the ActivityService.
	if p, err := client.GetProposal(ctx, artifactID); err != nil {
		out.print("", "GetProposal: "+err.Error())
	} else if p != nil {
		res.Latest = p
		out.print("", fmt.Sprintf("GetProposal (ActivityService, negotiation_id %s): latest version has %d bytes, created %s",
			room.NegotiationID(roomID, artifactID), len(p.GetArtifact()), p.GetCreatedAt().AsTime().Format(time.RFC3339)))
	}
	out.print("",
		fmt.Sprintf("Final outcome: %s", last.GetOutcome()),
		fmt.Sprintf("In the Temporal UI (http://localhost:8233 with `make dev`) open workflow %s:", room.NegotiationID(roomID, artifactID)),
		"one run per version, with the room-vote updates, the room-state query and the PublishProposal/PublishDecision activities.")
	return res, nil
}

// notice reports that an agent received a decision as a NEGOTIATION envelope.
type notice struct {
	agent   string // "producer" or the critic's short name
	outcome negotiationroompb.DecisionOutcome
}

// awaitNotices waits up to a few seconds for the producer and every critic to receive d on
// their streams (the coordinator sends the final decision to all of them), and returns who
// did and who did not, in a fixed order.
func awaitNotices(ctx context.Context, notices <-chan notice, d *negotiationroompb.NegotiationDecision) (received, missing []string) {
	want := []string{"producer"}
	for _, c := range critics {
		want = append(want, c.name)
	}
	got := map[string]bool{}
	timeout := time.After(5 * time.Second)
wait:
	for len(got) < len(want) {
		select {
		case n := <-notices:
			if n.outcome == d.GetOutcome() {
				got[n.agent] = true
			}
		case <-timeout:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	for _, w := range want {
		if got[w] {
			received = append(received, w)
		} else {
			missing = append(missing, w)
		}
	}
	return received, missing
}

// printDecision shows a decision's outcome, aggregate, reason and who received it.
func printDecision(out *printer, version int, d *negotiationroompb.NegotiationDecision, received, missing []string) {
	a := d.GetAggregatedScore()
	sentTo := strings.Join(received, ", ")
	if len(missing) > 0 {
		sentTo += " (not yet: " + strings.Join(missing, ", ") + ")"
	}
	out.print(
		fmt.Sprintf("Decision on version %d", version),
		fmt.Sprintf("  outcome    %s", d.GetOutcome()),
		fmt.Sprintf("  aggregate  weighted_mean %.2f, mean %.2f, min %.1f, max %.1f, std_dev %.2f, votes %d",
			a.GetWeightedMean(), a.GetMean(), a.GetMinScore(), a.GetMaxScore(), a.GetStdDev(), a.GetVoteCount()),
		fmt.Sprintf("  policy     %s", d.GetPolicyVersion()),
		fmt.Sprintf("  reason     %s", d.GetReason()),
		fmt.Sprintf("  sent to    %s (NEGOTIATION envelopes on their streams)", sentTo),
	)
}

// runCritic receives the critic's envelopes: each proposal (a NEGOTIATION envelope whose
// payload is the protojson of a NegotiationProposal) is reviewed and voted on; the final
// decision, which the coordinator also sends to the critics, is reported on notices.
func runCritic(ctx context.Context, out *printer, c critic, m *member, notices chan<- notice, cast *ballots) {
	client := room.NewWithStore(room.NewServerStore(m.agent.ClientConn()))
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
				vote(ctx, out, client, c, m.agent.ID(), &p, cast)
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

// vote reviews a proposal, submits the critic's vote through the room client and records it.
func vote(ctx context.Context, out *printer, client *room.Client, c critic, criticID string, p *negotiationroompb.NegotiationProposal, cast *ballots) {
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
	cast.cast(c.name, v, err)
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
