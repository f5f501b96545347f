package postgres

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The nonces of signed calls (§6.2 replay protection) are checked on every signed call, so
// their cost is the cost of authentication. Three choices keep it small:
//
//   - signed_call_nonces is UNLOGGED (no WAL). PostgreSQL empties it after a crash, so a call
//     made within the skew window before a crash could be replayed once after it; a clean
//     restart keeps it.
//   - Concurrent UseNonce calls share one statement: nonceFlushers goroutines each take the
//     calls waiting at that moment (up to nonceBatchMax) and decide them with one INSERT ... ON
//     CONFLICT. There is no linger: a lone call goes out at once, and under load the calls
//     that arrive while the statements are in flight form the next batch, like a group commit.
//   - Expired nonces are pruned every nonceSweepEvery, in bounded batches that skip rows a
//     concurrent statement holds.
const (
	// nonceFlushers is how many batch statements may be in flight at once.
	nonceFlushers = 2
	// nonceBatchMax bounds the calls decided by one statement.
	nonceBatchMax = 512
	// nonceStatementTimeout bounds one batch statement, so a connection that went away fails
	// the waiting calls (as unavailable) rather than holding them.
	nonceStatementTimeout = 10 * time.Second
	// nonceSweepEvery is how often expired nonces are deleted.
	nonceSweepEvery = time.Minute
	// nonceSweepBatch bounds the rows one delete statement removes.
	nonceSweepBatch = 10000
)

// nonceRequest is one UseNonce call waiting for its batch.
type nonceRequest struct {
	agentID, nonce string
	until          time.Time
	reply          chan nonceReply // buffered: a flusher never waits for a caller that gave up
}

// nonceReply is the outcome of one nonceRequest.
type nonceReply struct {
	fresh bool
	err   error
}

// nonceBatcher owns the goroutines that decide UseNonce calls and prune expired nonces.
type nonceBatcher struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
	// now is the clock nonces expire by: the frontends' own, the one the callers' until
	// values come from.
	now func() time.Time
	// requests is unbuffered, so once every flusher has returned no send can succeed and no
	// call is left without a reply.
	requests chan *nonceRequest
	stop     chan struct{}
	ctx      context.Context // cancelled by close: in-flight statements end
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	once     sync.Once
}

// startNonceBatcher starts the flushers and the pruner.
func startNonceBatcher(pool *pgxpool.Pool, logger *slog.Logger) *nonceBatcher {
	ctx, cancel := context.WithCancel(context.Background())
	b := &nonceBatcher{
		pool: pool, logger: logger, now: time.Now,
		requests: make(chan *nonceRequest), stop: make(chan struct{}), ctx: ctx, cancel: cancel,
	}
	for range nonceFlushers {
		b.wg.Add(1)
		go b.flusher()
	}
	b.wg.Add(1)
	go b.pruner()
	return b
}

// close stops the goroutines and waits for them; a call in flight fails. Calls made after it
// return errNoncesClosed.
func (b *nonceBatcher) close() {
	b.once.Do(func() {
		close(b.stop)
		b.cancel()
		b.wg.Wait()
	})
}

// flusher decides batches of waiting calls until close.
func (b *nonceBatcher) flusher() {
	defer b.wg.Done()
	batch := make([]*nonceRequest, 0, nonceBatchMax)
	for {
		select {
		case r := <-b.requests:
			batch = append(batch[:0], r)
		case <-b.stop:
			return
		}
	collect:
		for len(batch) < nonceBatchMax {
			select {
			case r := <-b.requests:
				batch = append(batch, r)
			default:
				break collect
			}
		}
		b.flush(batch)
		clear(batch) // let the replied requests go
	}
}

// nonceKey identifies a remembered nonce.
type nonceKey struct{ agentID, nonce string }

// flush decides one batch with one statement and replies to every call. A nonce that appears
// more than once in the batch is decided by its first call; the others are replays of it,
// whatever the first was — and ON CONFLICT DO UPDATE may not touch one row twice anyway. When
// the statement is refused for its data rather than for an outage, each call is decided on
// its own, so one bad call cannot fail the others.
func (b *nonceBatcher) flush(batch []*nonceRequest) {
	firsts := make(map[nonceKey]*nonceRequest, len(batch))
	unique := make([]*nonceRequest, 0, len(batch))
	for _, r := range batch {
		k := nonceKey{r.agentID, r.nonce}
		if _, dup := firsts[k]; !dup {
			firsts[k] = r
			unique = append(unique, r)
		}
	}
	fresh, err := b.decide(unique)
	errs := map[nonceKey]error{}
	if err != nil && len(unique) > 1 && !isUnavailable(err) {
		fresh, err = map[nonceKey]bool{}, nil
		for _, r := range unique {
			k := nonceKey{r.agentID, r.nonce}
			one, oneErr := b.decide([]*nonceRequest{r})
			fresh[k], errs[k] = one[k], oneErr
		}
	}
	for _, r := range batch {
		k := nonceKey{r.agentID, r.nonce}
		e := cmp.Or(err, errs[k])
		if e != nil {
			e = fmt.Errorf("postgres: use nonce: %w", unavailable(e))
		}
		r.reply <- nonceReply{fresh: e == nil && firsts[k] == r && fresh[k], err: e}
	}
}

// decide records the distinct nonces of reqs with one statement and returns which were
// fresh; it sorts reqs. Rows are inserted in (agent_id, nonce) byte order, the same in every process, so two
// statements that share nonces lock them in the same order and cannot deadlock.
func (b *nonceBatcher) decide(reqs []*nonceRequest) (map[nonceKey]bool, error) {
	slices.SortFunc(reqs, func(x, y *nonceRequest) int {
		return cmp.Or(cmp.Compare(x.agentID, y.agentID), cmp.Compare(x.nonce, y.nonce))
	})
	agents, nonces, untils := make([]string, len(reqs)), make([]string, len(reqs)), make([]time.Time, len(reqs))
	for i, r := range reqs {
		agents[i], nonces[i], untils[i] = r.agentID, r.nonce, r.until
	}
	ctx, cancel := context.WithTimeout(b.ctx, nonceStatementTimeout)
	defer cancel()
	// A row comes back when it was inserted, or when the nonce it replaces had expired (the
	// DO UPDATE's WHERE held): exactly the fresh nonces.
	rows, err := b.pool.Query(ctx, `
		INSERT INTO signed_call_nonces AS n (agent_id, nonce, until)
		SELECT a, c, u FROM unnest($1::text[], $2::text[], $3::timestamptz[]) WITH ORDINALITY AS x(a, c, u, ord)
		ORDER BY ord
		ON CONFLICT ON CONSTRAINT signed_call_nonces_pkey DO UPDATE SET until = EXCLUDED.until
		WHERE n.until < $4
		RETURNING n.agent_id, n.nonce`, agents, nonces, untils, b.now())
	if err != nil {
		return nil, err
	}
	fresh := make(map[nonceKey]bool, len(reqs))
	var k nonceKey
	_, err = pgx.ForEachRow(rows, []any{&k.agentID, &k.nonce}, func() error {
		fresh[k] = true
		return nil
	})
	return fresh, err
}

// pruner deletes expired nonces every nonceSweepEvery until close.
func (b *nonceBatcher) pruner() {
	defer b.wg.Done()
	t := time.NewTicker(nonceSweepEvery)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		if n, err := b.prune(b.ctx); err != nil && b.ctx.Err() == nil {
			b.logger.Warn("pruning expired nonces failed", "error", err)
		} else if n > 0 {
			b.logger.Debug("pruned expired nonces", "rows", n)
		}
	}
}

// prune deletes the nonces that expired before now, nonceSweepBatch at a time, and returns
// how many it deleted. SKIP LOCKED leaves rows a concurrent UseNonce holds: the pruner never
// waits for a batch (nor a batch for it, beyond one short statement), and another frontend's
// pruner takes other rows.
func (b *nonceBatcher) prune(ctx context.Context) (int, error) {
	total := 0
	for {
		tag, err := b.pool.Exec(ctx, `
			DELETE FROM signed_call_nonces AS n USING (
				SELECT agent_id, nonce FROM signed_call_nonces WHERE until < $1
				LIMIT $2 FOR UPDATE SKIP LOCKED
			) AS d
			WHERE n.agent_id = d.agent_id AND n.nonce = d.nonce`, b.now(), nonceSweepBatch)
		if err != nil {
			return total, fmt.Errorf("postgres: prune nonces: %w", unavailable(err))
		}
		total += int(tag.RowsAffected())
		if tag.RowsAffected() < nonceSweepBatch {
			return total, nil
		}
	}
}
