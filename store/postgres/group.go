package postgres

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sw4rm/sw4rm-temporal/telemetry"
)

// Group commit. The message plane's durable writes — admissions, planned steps (a delivery's
// confirmation with its transition and follow-up ACK), artifacts — are each one statement, or
// two, that used to commit on their own: one network round trip, one transaction and one WAL
// flush each. Writers running at the same time now share them. A write is a groupMember: the
// statements it queues and a read of their results. GroupCommitOptions.Flushers goroutines
// each take the members waiting at that moment (up to Max of them, after lingering for
// Window when one is set) and send them all as one pgx batch: one round trip, and
// PostgreSQL runs everything up to the batch's single Sync as one implicit transaction, so
// the whole group commits — and flushes the WAL — once. No member is answered before that
// commit, so a write is acknowledged only once it is durable, as before.
//
// An error in one member must fail only that member. PostgreSQL aborts a transaction at its
// first error, so when member k fails, nothing of the group was kept: the members before k
// run again as a group, k runs alone (its error is then its own, not a neighbour's: a message_id
// admitted twice in one group fails the second only once the first has committed), and the
// members after k run again as a group. A group whose commit itself fails (the connection
// broke) answers every member with the error, whose outcome is then unknown — as a lone
// statement's was.
//
// Members of one group are independent: a caller waits for its answer before it writes again,
// so two writes of one caller never share a group, and each member's statements run in the
// order it queued them. Members lock what their statements lock, in their order. Two groups
// in flight at once could therefore take two recipients' admission locks in opposite order;
// each group takes the recipient locks of all its members first, in one statement and in hash
// order (lockRecipientsSQL), so groups queue on those locks instead of deadlocking. Other row
// locks (an idempotency entry, a message's row) are rarely shared by concurrent writes; should
// PostgreSQL find a deadlock, the group fails and its members run again as described above.
const (
	// DefaultGroupCommitFlushers is the default number of groups in flight at once: on the
	// 2-core machine one flusher made the largest groups and the most messages per second
	// (3.5 writes per commit, 742–749 messages/s, against 2.1 and 590–721 with two and
	// 1.35 and 496–560 with four), for a send → deliver median 0.1 ms longer than with two.
	DefaultGroupCommitFlushers = 1
	// groupStatementTimeout bounds one group, so a connection that went away fails the
	// waiting members rather than holding them.
	groupStatementTimeout = 30 * time.Second
	// DefaultGroupCommitMax is the default bound on the members of one group.
	DefaultGroupCommitMax = 64
)

// lockRecipientsSQL takes the transaction-scoped recipient locks of a group's
// capacity-limited admissions in one statement and in one order, the same in every process
// (see Admit for what the lock protects). Parameters: $1 recipientLockClass, $2 the
// recipients' agent_ids.
const lockRecipientsSQL = `
SELECT count(pg_advisory_xact_lock($1::int, h))
FROM (SELECT DISTINCT hashtext(r) AS h FROM unnest($2::text[]) AS r ORDER BY h) AS s`

// groupMember is one write waiting for its group.
type groupMember struct {
	// lockRecipient, when set, is the recipient whose admission lock the member needs.
	lockRecipient string
	// queue adds the member's statements to the group's batch.
	queue func(b *pgx.Batch)
	// read reads exactly the member's results, in order; its error is the member's failure.
	// It may run more than once (the group ran again), and its last run is the one
	// committed.
	read func(br pgx.BatchResults) error
	// done receives the member's outcome once its group committed or it failed; buffered,
	// so a flusher never waits for the caller.
	done chan error
}

// GroupCommitOptions configure the message plane's group commit.
type GroupCommitOptions struct {
	// Window is how long a flusher waits for more members after the first one arrived,
	// unless the group fills first; zero sends a group as soon as a flusher is free, so
	// groups form only from writes that arrived while the flushers were busy.
	Window time.Duration
	// Max bounds the members of one group; zero means DefaultGroupCommitMax.
	Max int
	// Flushers is how many groups may be in flight at once, each on a connection of its
	// own; zero means DefaultGroupCommitFlushers. More flushers overlap more commits and
	// make smaller groups: worth it when PostgreSQL has cores to spare.
	Flushers int
}

// groupCommitter owns the flushers.
type groupCommitter struct {
	pool *pgxpool.Pool
	opts GroupCommitOptions
	// members is unbuffered, so once every flusher has returned no send can succeed and no
	// member is left without an answer.
	members chan *groupMember
	stop    chan struct{}
	ctx     context.Context // cancelled by close: groups in flight end
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	once    sync.Once

	// groups and grouped count the groups committed and their members, for GroupCommitStats.
	groups, grouped atomic.Int64
}

// errStoreClosed answers a write made after Close.
var errStoreClosed = errors.New("postgres: store closed")

// startGroupCommitter starts the flushers.
func startGroupCommitter(pool *pgxpool.Pool, opts GroupCommitOptions) *groupCommitter {
	if opts.Max <= 0 {
		opts.Max = DefaultGroupCommitMax
	}
	if opts.Flushers <= 0 {
		opts.Flushers = DefaultGroupCommitFlushers
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &groupCommitter{pool: pool, opts: opts,
		members: make(chan *groupMember), stop: make(chan struct{}), ctx: ctx, cancel: cancel}
	for range opts.Flushers {
		c.wg.Add(1)
		go c.flusher()
	}
	return c
}

// close stops the flushers and waits for them; a group in flight fails.
func (c *groupCommitter) close() {
	c.once.Do(func() {
		close(c.stop)
		c.cancel()
		c.wg.Wait()
	})
}

// do runs m in a group and returns its outcome once the group committed. A caller whose
// context ends first is answered with its error at once, and its write may still commit (as
// a statement cut off mid-flight may): m's read may then still write the variables it scans
// into, so a caller reads them only after a nil error.
func (c *groupCommitter) do(ctx context.Context, m *groupMember) (err error) {
	if traced(ctx) {
		// The flushers run the group under a context of their own, so a traced write shows
		// its wait for the group's commit here, in its caller's trace.
		ctx, _ = telemetry.Tracer().Start(ctx, "group commit", trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("db.system.name", "postgresql")))
		defer func() { endSpan(ctx, err) }()
	}
	m.done = make(chan error, 1)
	select {
	case c.members <- m:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.stop:
		return errStoreClosed
	}
	select {
	case err := <-m.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flusher sends groups until close.
func (c *groupCommitter) flusher() {
	defer c.wg.Done()
	group := make([]*groupMember, 0, c.opts.Max)
	var linger *time.Timer
	for {
		select {
		case m := <-c.members:
			group = append(group[:0], m)
		case <-c.stop:
			return
		}
		if c.opts.Window > 0 {
			if linger == nil {
				linger = time.NewTimer(c.opts.Window)
			} else {
				linger.Reset(c.opts.Window)
			}
		}
	collect:
		for len(group) < c.opts.Max {
			select {
			case m := <-c.members:
				group = append(group, m)
				continue
			default:
			}
			if linger == nil {
				break collect
			}
			select {
			case m := <-c.members:
				group = append(group, m)
			case <-linger.C:
				break collect
			case <-c.stop:
				break collect
			}
		}
		if linger != nil && !linger.Stop() {
			select {
			case <-linger.C:
			default:
			}
		}
		c.commit(group)
		clear(group) // let the answered members go
	}
}

// commit runs members as one transaction and answers each of them, splitting the group
// around a failing member as the package comment describes.
func (c *groupCommitter) commit(members []*groupMember) {
	c.commitSplitting(c.ctx, members, func(error) bool { return true })
}

// commitSplitting is commit, splitting around a failing member only when split says its
// error may be that member's own; any other error fails every member, and the group then
// changed nothing.
func (c *groupCommitter) commitSplitting(ctx context.Context, members []*groupMember, split func(error) bool) {
	if len(members) == 0 {
		return
	}
	failed, err := c.exec(ctx, members)
	switch {
	case err == nil:
		c.groups.Add(1)
		c.grouped.Add(int64(len(members)))
		for _, m := range members {
			m.done <- nil
		}
	case len(members) == 1 || failed < 0 || !split(err):
		// The member's own error, the commit's, or one that is not a member's: answered as a
		// lone statement's would be.
		for _, m := range members {
			m.done <- err
		}
	default:
		c.commitSplitting(ctx, members[:failed], split)
		c.commitSplitting(ctx, members[failed:failed+1], split)
		c.commitSplitting(ctx, members[failed+1:], split)
	}
}

// exec sends members as one batch, bounded by ctx and groupStatementTimeout, and reads their
// results. It returns the index of the member whose read failed with that error, or -1 with
// the commit's error (nil: committed).
func (c *groupCommitter) exec(ctx context.Context, members []*groupMember) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, groupStatementTimeout)
	defer cancel()
	b := &pgx.Batch{}
	var recipients []string
	for _, m := range members {
		if m.lockRecipient != "" {
			recipients = append(recipients, m.lockRecipient)
		}
	}
	switch {
	case len(recipients) == 1:
		// One lock needs no ordering: the plainer statement is cheaper to run.
		b.Queue(`SELECT pg_advisory_xact_lock($1, hashtext($2))`, recipientLockClass, recipients[0])
	case len(recipients) > 1:
		b.Queue(lockRecipientsSQL, recipientLockClass, recipients)
	}
	for _, m := range members {
		m.queue(b)
	}
	br := c.pool.SendBatch(ctx, b)
	if len(recipients) > 0 {
		if _, err := br.Exec(); err != nil {
			// Nothing of any member ran. Blaming the first member makes commit run it alone
			// and the others again as a group, which is all a failure of the locks needs.
			_ = br.Close()
			return 0, err
		}
	}
	for i, m := range members {
		if err := m.read(br); err != nil {
			_ = br.Close()
			return i, err
		}
	}
	return -1, br.Close()
}

// GroupCommitStats reports how many groups the message plane committed and how many writes
// they carried, since Open: their ratio is the mean group size.
func (s *Store) GroupCommitStats() (groups, members int64) {
	return s.groups.groups.Load(), s.groups.grouped.Load()
}
