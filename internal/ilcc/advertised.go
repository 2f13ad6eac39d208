package ilcc

import (
	"iter"

	"ilnp/internal/wire"
)

// allAdvertisedBatch is how many correspondents AllAdvertised takes per hold of the lock.
const allAdvertisedBatch = 64

// AllAdvertised is EachAdvertised as a sequence that holds the cache's lock only while it
// steps its walk of the correspondents (a few dozen at a time), not while the caller handles
// them: the state file's snapshot walks it a share per turn of the daemon's loop (state.Walk;
// issue 28), and the cache changes between shares as it would in the body of a range loop (a
// correspondent removed before the walk reached it is not passed, one added may be). The
// slice passed must not be changed; a peer's advertisement is never changed in place, so it
// stays what the peer was told when the walk reached it.
func (c *Cache) AllAdvertised() iter.Seq2[wire.NID, []wire.LocatorEntry] {
	type told struct {
		nid wire.NID
		adv []wire.LocatorEntry
	}
	return func(yield func(wire.NID, []wire.LocatorEntry) bool) {
		batch := make([]told, 0, allAdvertisedBatch)
		flush := func() bool {
			c.mu.Unlock()
			defer c.mu.Lock()
			for _, t := range batch {
				if !yield(t.nid, t.adv) {
					return false
				}
			}
			batch = batch[:0]
			return true
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for nid, p := range c.peers {
			if batch = append(batch, told{nid, p.adv()}); len(batch) == allAdvertisedBatch && !flush() {
				return
			}
		}
		flush()
	}
}
