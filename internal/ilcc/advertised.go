package ilcc

import (
	"iter"

	"ilnp/internal/wire"
)

// AllAdvertised is EachAdvertised as a sequence that holds the cache's lock only while it
// steps its walk of the correspondents, not while the caller handles one: the state file's
// snapshot walks it a share per turn of the daemon's loop (state.Walk; issue 28), and the
// cache changes between shares as it would in the body of a range loop (a correspondent
// removed before the walk reached it is not passed, one added may be). The slice passed must
// not be kept past the call or changed; a peer's advertisement is never changed in place, so
// it stays what the peer was told when it was passed.
func (c *Cache) AllAdvertised() iter.Seq2[wire.NID, []wire.LocatorEntry] {
	return func(yield func(wire.NID, []wire.LocatorEntry) bool) {
		c.mu.Lock()
		locked := true
		defer func() {
			if locked {
				c.mu.Unlock()
			}
		}()
		for nid, p := range c.peers {
			adv := p.advertised
			c.mu.Unlock()
			locked = false
			if !yield(nid, adv) {
				return
			}
			c.mu.Lock()
			locked = true
		}
	}
}
