// Package postgres is the production implementation of store.Store on PostgreSQL through pgx.
//
// Open applies the embedded schema migrations (goose, serialized across processes by a
// PostgreSQL advisory lock), opens a connection pool for queries and one dedicated connection
// that LISTENs on the sw4rm_deliveries channel, so that Subscribe wakes up for rows admitted by
// any process sharing the database. Any number of frontends can share one database: buffer
// capacity is enforced under a per-recipient transaction lock, admissions with the same
// idempotency key are decided one at a time under the cache entry's row lock (always taken
// after the recipient lock), claims and the Expire/ExpirePendingResponses sweeps use FOR UPDATE
// SKIP LOCKED, and leases, ACK timeouts, TTLs, windows and deadlines are measured with the
// database clock. A first registration of an agent's key is decided under a per-agent
// transaction lock; the nonces of signed calls go to an unlogged table through a batcher
// (nonces.go) and expire by the frontends' clock, the one their expiry times come from.
package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/internal/hub"
)

// NotifyChannel is the PostgreSQL LISTEN/NOTIFY channel on which Admit and ReleaseLeases
// announce, with the recipient's agent_id as payload, that rows may have become deliverable.
const NotifyChannel = "sw4rm_deliveries"

// MigrationsTable is the goose version table that records which migrations have run.
const MigrationsTable = "sw4rm_schema_migrations"

const (
	// migrationLockID is the session advisory lock (bigint key space) that serializes
	// migrations of concurrently starting processes; it differs from goose's default so other
	// goose users of the same database do not contend with us.
	migrationLockID int64 = 0x5357_4152_4d00_0001 // "SWARM" + 1
	// recipientLockClass is the first key of the two-int4 advisory lock taken per recipient
	// by capacity-limited admissions. The two-key form lives in a key space separate from
	// one-bigint locks such as migrationLockID, so they can never collide.
	recipientLockClass int32 = 0x5357 // "SW"

	listenerAppName    = "sw4rm-store-listener"
	listenerMinBackoff = 100 * time.Millisecond
	listenerMaxBackoff = 5 * time.Second
)

//go:embed migrations/*.sql
var migrationsFS embed.FS

// Store is the PostgreSQL store.Store. Create one with Open and release it with Close.
type Store struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
	hub    *hub.Hub

	// listenConfig configures the dedicated LISTEN connection (a copy of the pool's).
	listenConfig *pgx.ConnConfig

	stopListener context.CancelFunc
	listenerDone chan struct{}
	closeOnce    sync.Once

	// nonces decides UseNonce calls in batches and prunes expired nonces (nonces.go).
	nonces *nonceBatcher
	// groups commits the message plane's concurrent writes together (group.go).
	groups *groupCommitter
}

// Option configures Open.
type Option func(*options)

// options are what Open's Options set.
type options struct {
	groupCommit GroupCommitOptions
}

// WithGroupCommit sets how the message plane groups concurrent writes into one commit.
func WithGroupCommit(o GroupCommitOptions) Option {
	return func(opts *options) { opts.groupCommit = o }
}

var _ store.Store = (*Store)(nil)

// Open connects to databaseURL, applies pending schema migrations and starts the notification
// listener. A nil logger discards log output. The context bounds only the opening work.
func Open(ctx context.Context, databaseURL string, logger *slog.Logger, opts ...Option) (*Store, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	poolConfig, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse database url: %w", err)
	}
	if err := migrate(ctx, poolConfig.ConnConfig.Copy(), logger); err != nil {
		return nil, err
	}
	if !strings.Contains(databaseURL, "pool_max_conns") {
		// pgxpool's default (max(4, CPUs)) starves a frontend whose streams, sweeps, audit
		// writer and RPCs all need connections at once; pool_max_conns in the URL overrides.
		poolConfig.MaxConns = max(poolConfig.MaxConns, 16)
	}
	// Statements of traced calls become spans (queryTracer); the migrations above made none.
	poolConfig.ConnConfig.Tracer = queryTracer{}
	pool, err := pgxpool.NewWithConfig(ctx, poolConfig)
	if err != nil {
		return nil, fmt.Errorf("postgres: create pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: ping: %w", err)
	}
	s := &Store{
		pool:         pool,
		logger:       logger,
		hub:          hub.New(),
		listenConfig: poolConfig.ConnConfig.Copy(),
		listenerDone: make(chan struct{}),
	}
	s.listenConfig.RuntimeParams["application_name"] = listenerAppName
	// LISTEN is established before Open returns, so a Subscribe right after Open cannot miss
	// a notification committed after it.
	conn, err := s.connectListener(ctx)
	if err != nil {
		pool.Close()
		return nil, err
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	s.stopListener = cancel
	go s.listen(loopCtx, conn)
	s.nonces = startNonceBatcher(pool, logger)
	s.groups = startGroupCommitter(pool, o.groupCommit)
	return s, nil
}

// migrate applies the embedded migrations through goose's Provider API on a database/sql
// handle that exists only for the duration of the migration.
func migrate(ctx context.Context, connConfig *pgx.ConnConfig, logger *slog.Logger) error {
	db := stdlib.OpenDB(*connConfig)
	defer db.Close()
	fsys, err := fs.Sub(migrationsFS, "migrations")
	if err != nil {
		return fmt.Errorf("postgres: migrations: %w", err)
	}
	// A session-level advisory lock held for the whole run: processes starting at once queue
	// up behind the first, which applies the migrations; the others then find nothing pending.
	// Retry every second for up to five minutes.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(migrationLockID), lock.WithLockTimeout(1, 300))
	if err != nil {
		return fmt.Errorf("postgres: migration locker: %w", err)
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithSessionLocker(locker),
		goose.WithTableName(MigrationsTable),
		// Ignore Go migrations that other packages may register globally with goose.
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return fmt.Errorf("postgres: migration provider: %w", err)
	}
	results, err := provider.Up(ctx)
	if err != nil {
		return fmt.Errorf("postgres: apply migrations: %w", err)
	}
	for _, r := range results {
		logger.Info("store migration applied", "version", r.Source.Version, "path", r.Source.Path, "duration", r.Duration)
	}
	return nil
}

// Messages returns the routed message plane.
func (s *Store) Messages() store.MessagePlane { return (*messagePlane)(s) }

// Registry returns the agent registry projection.
func (s *Store) Registry() store.Registry { return (*registry)(s) }

// Audit returns the audit log.
func (s *Store) Audit() store.AuditLog { return (*auditLog)(s) }

// Artifacts returns the negotiation artifact store.
func (s *Store) Artifacts() store.Artifacts { return (*artifacts)(s) }

// HITL returns the human-in-the-loop invocation projection.
func (s *Store) HITL() store.HITL { return (*hitl)(s) }

// Kind returns "postgres".
func (s *Store) Kind() string { return "postgres" }

// Pool returns the underlying connection pool, for health checks and operator tooling.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Close stops the listener goroutine, the nonce batcher and the group committer, waits for them to exit, ends every
// subscription and closes the pool. It is safe to call more than once.
func (s *Store) Close() {
	s.closeOnce.Do(func() {
		s.stopListener()
		<-s.listenerDone
		s.nonces.close()
		s.groups.close()
		s.hub.Close()
		s.pool.Close()
	})
}

// connectListener opens the dedicated notification connection and subscribes it.
func (s *Store) connectListener(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, s.listenConfig)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect listener: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		closeConn(conn)
		return nil, fmt.Errorf("postgres: listen %s: %w", NotifyChannel, err)
	}
	return conn, nil
}

// listen is the single goroutine that owns the LISTEN connection and dispatches each
// notification to the local subscribers of its agent. It exits when ctx is cancelled.
func (s *Store) listen(ctx context.Context, conn *pgx.Conn) {
	defer close(s.listenerDone)
	backoff := listenerMinBackoff
	for {
		if conn == nil {
			c, err := s.connectListener(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				s.logger.Warn("store listener reconnect failed", "err", err, "retry_in", backoff)
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(backoff*2, listenerMaxBackoff)
				continue
			}
			conn, backoff = c, listenerMinBackoff
			s.logger.Warn("store listener reconnected; waking every subscriber")
			// Notifications sent while we were disconnected are lost for good, so every
			// subscriber re-polls once; LISTEN is already active again, so nothing after this
			// point can be missed.
			s.hub.WakeAll()
		}
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			closeConn(conn)
			conn = nil
			if ctx.Err() != nil {
				return
			}
			s.logger.Warn("store listener connection lost", "err", err)
			continue
		}
		s.hub.Wake(n.Payload)
	}
}

// closeConn closes a connection with a short deadline of its own, since the caller's context
// may already be cancelled.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// rollback ends tx if it is still open; after Commit it is a no-op.
func rollback(tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = tx.Rollback(ctx)
}

// utc converts a scanned timestamp to UTC (pgx returns local time).
func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

// nullTime maps the zero time to SQL NULL.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// nullBytes maps an empty slice to SQL NULL.
func nullBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// listQuery collects the optional conditions of a List call and numbers their parameters, so
// each List builds its WHERE clause and LIMIT the same way.
type listQuery struct {
	conds []string
	args  []any
}

// add appends a condition whose one "?" stands for arg.
func (q *listQuery) add(cond string, arg any) {
	q.args = append(q.args, arg)
	q.conds = append(q.conds, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(q.args))))
}

// addConst appends a condition without a parameter.
func (q *listQuery) addConst(cond string) { q.conds = append(q.conds, cond) }

// where is the WHERE clause of the conditions, empty when there are none.
func (q *listQuery) where() string {
	if len(q.conds) == 0 {
		return ""
	}
	return "WHERE " + strings.Join(q.conds, " AND ")
}

// limit appends the row limit (def when n is not positive) as the last parameter and returns
// its placeholder.
func (q *listQuery) limit(n, def int) string {
	if n <= 0 {
		n = def
	}
	q.args = append(q.args, n)
	return "$" + strconv.Itoa(len(q.args))
}
