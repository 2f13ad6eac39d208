package node

import (
	"context"
	"time"

	"ilnp/internal/datapath"
	"ilnp/internal/lu"
	"ilnp/internal/rendezvous"
	"ilnp/internal/reresolve"
	"ilnp/internal/wire"
)

// Re-resolution (the double jump, issue 13): when a correspondent's LUs go unanswered the
// node looks the correspondent's name up again in DNS and, if its published locators
// changed, points the session there and sends the LU to them. The policy (when, how often,
// what an answer changes) is the reresolve.Planner's; this file does the I/O: one goroutine
// per lookup, whose answer comes back to the loop through n.do.

// reresolveLookupTimeout bounds one re-resolution query.
const reresolveLookupTimeout = 2 * time.Second

// enableReresolve turns re-resolution on with the stub resolver's NID/L64 finder.
func (n *Node) enableReresolve(f *rendezvous.Finder) {
	if n.rdv == nil || n.rdv.ctx == nil {
		return
	}
	plan, err := reresolve.New(reresolve.Config{MaxLocators: datapath.MaxRemoteLocators})
	if err != nil {
		n.log.Warn("re-resolution disabled", "err", err)
		return
	}
	n.rdv.finder, n.rdv.plan = f, plan
}

// reresolveOn shows the planner one LU engine action (on the loop).
func (n *Node) reresolveOn(a lu.Action) {
	if n.rdv == nil || n.rdv.plan == nil {
		return
	}
	if l, ok := n.rdv.plan.OnAction(a, n.peerName(a.Message.Peer), time.Now()); ok {
		n.startReresolve(l)
	}
}

// peerName is a name the node resolved (or was given) for the correspondent, "" if none.
func (n *Node) peerName(nid wire.NID) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	best := ""
	for name, ilvs := range n.peers {
		for _, v := range ilvs {
			if v.ILV.NID == nid && (best == "" || name < best) {
				best = name
			}
		}
	}
	return best
}

func (n *Node) startReresolve(l reresolve.Lookup) {
	r := n.rdv
	n.count("reresolve_lookups")
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(r.ctx, reresolveLookupTimeout)
		found, _, err := r.finder.Fresh(ctx, l.Name)
		cancel()
		if r.ctx.Err() != nil {
			return
		}
		_ = n.do(r.ctx, func() error {
			n.reresolved(l, found, err)
			return nil
		})
	}()
}

// reresolved applies a lookup's answer (on the loop).
func (n *Node) reresolved(l reresolve.Lookup, found []wire.RankedILV, lookupErr error) {
	now := time.Now()
	r := n.rdv
	b, bound := n.cache.Binding(l.Peer)
	var current []wire.L64
	for _, rl := range b.RemoteLocators {
		current = append(current, rl.Locator)
	}
	_, pending := n.engine.Outstanding(l.Peer)
	out := r.plan.Done(l.Peer, found, lookupErr, current, bound && pending)
	if !bound {
		r.plan.Forget(l.Peer)
		return
	}
	if lookupErr != nil {
		n.count("reresolve_errors")
		n.log.Warn("re-resolution", "peer", l.Peer, "name", l.Name, "err", lookupErr)
	}
	if out.Locators != nil {
		eff, err := n.cache.ReplaceRemotes(l.Peer, out.Locators, now)
		if err != nil {
			n.log.Warn("re-resolution not applied", "peer", l.Peer, "err", err)
			return
		}
		n.count("reresolve_changed")
		n.log.Info("correspondent re-resolved: new locators", "peer", l.Peer, "name", l.Name,
			"locators", len(out.Locators), "lookup", l.N)
		n.apply(eff, now)
		actions, err := n.engine.Send(out.Send, now)
		if err != nil {
			n.log.Warn("LU after re-resolution", "peer", l.Peer, "err", err)
		}
		n.perform(actions)
		return
	}
	if out.Again {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			t := time.NewTimer(out.Retry)
			defer t.Stop()
			select {
			case <-r.ctx.Done():
				return
			case <-t.C:
			}
			_ = n.do(r.ctx, func() error {
				if next, ok := r.plan.Retry(l.Peer, n.peerName(l.Peer), time.Now()); ok {
					n.startReresolve(next)
				}
				return nil
			})
		}()
	}
}
