package router

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// TestRecordCacheDropsExpiredEntries: entries nobody recalls (their message ended on
// another frontend) leave the cache once their TTL passed, at the next put after a sweep is
// due, rather than piling up to the cache's bound.
func TestRecordCacheDropsExpiredEntries(t *testing.T) {
	var c recordCache
	rec := func(id string) store.MessageRecord {
		return store.MessageRecord{MessageID: id, Envelope: &commonpb.Envelope{MessageId: id}}
	}
	for _, id := range []string{"a", "b", "c"} {
		c.put(rec(id), true)
	}
	// Age two of them past the TTL, as if remembered long ago.
	c.mu.Lock()
	for _, id := range []string{"a", "b"} {
		e := c.entries[id]
		e.seen = time.Now().Add(-recordCacheTTL - time.Second)
		c.entries[id] = e
	}
	c.mu.Unlock()

	c.put(rec("d"), true)
	assert.Len(t, c.entries, 4, "a sweep waits a quarter of the TTL after the last one")

	c.mu.Lock()
	c.swept = time.Now().Add(-recordCacheTTL)
	c.mu.Unlock()
	c.put(rec("e"), true)
	assert.Len(t, c.entries, 3, "the two expired entries were swept: c, d and e stay")
	assert.Nil(t, c.recall("a"))
	assert.NotNil(t, c.recall("c"))
}
