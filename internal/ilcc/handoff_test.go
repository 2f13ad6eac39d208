package ilcc

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"ilnp/internal/lu"
	"ilnp/internal/luguard"
	"ilnp/internal/wire"
)

// twoNodes wires a mobile node (cache + LU engine) and a correspondent (cache) together the
// way ilnpd does, over an in-memory link that loses the packets drop() picks and delivers the
// others after a fixed one-way delay. Only the order of calls matters; there is no I/O.
type twoNodes struct {
	t       *testing.T
	mn, cn  *Cache
	engine  *lu.Engine
	now     time.Time
	delay   time.Duration
	drop    func(p wirePacket) bool
	inbox   []wirePacket
	results []lu.Result
	gaveUp  int
}

type wirePacket struct {
	at    time.Time
	toCN  bool
	from  wire.NID
	nonce wire.Nonce
	lu    wire.LocatorUpdate
}

func newTwoNodes(t *testing.T, mode Mode) *twoNodes {
	t.Helper()
	mn, err := New(Config{NID: myNID, Mode: mode, NewNonce: func() (wire.Nonce, error) { return nonce(0x3333), nil }})
	if err != nil {
		t.Fatal(err)
	}
	cn, err := New(Config{NID: cnNID, NewNonce: func() (wire.Nonce, error) { return nonce(0xcccc), nil }})
	if err != nil {
		t.Fatal(err)
	}
	engine, err := lu.New(lu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	n := &twoNodes{t: t, mn: mn, cn: cn, engine: engine, now: t0, delay: 20 * time.Millisecond,
		drop: func(wirePacket) bool { return false }}
	// CN: a static locator. MN: first network. Then a session both ways, nonces learned from
	// the first packets (the datapath's "new session" events).
	n.cnApply(cn.UpdateLocal(LocalUpdate{Locator: lCN, IfIndex: 1, ValidLifetime: Infinite, PreferredLifetime: Infinite}, t0))
	n.mnApply(mn.UpdateLocal(ra(lMN1, ifWifi, router1), t0))
	n.mnApply(mn.OpenSession(Session{Local: wire.ILV{Locator: lMN1, NID: myNID}, Remote: wire.ILV{Locator: lCN, NID: cnNID}, RemoteNonce: nonce(0xcccc)}, t0))
	n.cnApply(cn.OpenSession(Session{Local: wire.ILV{Locator: lCN, NID: cnNID}, Remote: wire.ILV{Locator: lMN1, NID: myNID}, RemoteNonce: nonce(0x3333)}, t0))
	return n
}

func (n *twoNodes) mnApply(eff Effects, err ...error) {
	n.t.Helper()
	if len(err) > 0 && err[0] != nil {
		n.t.Fatal(err[0])
	}
	for _, m := range eff.Updates {
		acts, err := n.engine.Send(m, n.now)
		if err != nil {
			n.t.Fatal(err)
		}
		n.perform(acts)
	}
	for _, gone := range eff.Removed {
		n.engine.Forget(gone)
	}
}

func (n *twoNodes) cnApply(eff Effects, err ...error) {
	n.t.Helper()
	if len(err) > 0 && err[0] != nil {
		n.t.Fatal(err[0])
	}
	for _, a := range eff.Acks {
		n.send(wirePacket{toCN: false, from: cnNID, nonce: a.Nonce, lu: a.Update})
	}
}

func (n *twoNodes) perform(acts []lu.Action) {
	for _, a := range acts {
		switch a.Kind {
		case lu.Transmit:
			n.send(wirePacket{toCN: true, from: myNID, nonce: a.Message.Nonce, lu: a.Message.Update})
		case lu.GiveUp:
			n.gaveUp++
			n.mn.LUGaveUp(a.Message.Peer, n.now)
		}
	}
}

func (n *twoNodes) send(p wirePacket) {
	if n.drop(p) {
		return
	}
	p.at = n.now.Add(n.delay)
	n.inbox = append(n.inbox, p)
}

// run advances the clock through packet deliveries and both nodes' timers until until.
func (n *twoNodes) run(until time.Time) {
	for {
		next, kind := until, ""
		if len(n.inbox) > 0 && !n.inbox[0].at.After(next) {
			next, kind = n.inbox[0].at, "packet"
		}
		if d, ok := n.engine.NextDeadline(); ok && d.Before(next) {
			next, kind = d, "engine"
		}
		if d, ok := n.mn.NextDeadline(); ok && d.Before(next) {
			next, kind = d, "mn"
		}
		if kind == "" {
			n.now = until
			return
		}
		n.now = next
		switch kind {
		case "engine":
			n.perform(n.engine.Tick(n.now))
		case "mn":
			n.mnApply(n.mn.Tick(n.now))
		case "packet":
			p := n.inbox[0]
			n.inbox = n.inbox[1:]
			if p.toCN {
				eff, err := n.cn.ApplyLU(p.from, p.nonce, p.lu, n.now)
				if err != nil {
					n.t.Fatalf("CN rejected LU: %v", err)
				}
				n.cnApply(eff)
				continue
			}
			if err := n.mn.VerifyNonce(p.from, p.nonce); err != nil {
				n.t.Fatalf("MN rejected ACK: %v", err)
			}
			res, acts := n.engine.Ack(p.from, p.lu, n.now)
			n.results = append(n.results, res)
			n.perform(acts)
		}
	}
}

func TestHandoffEndToEndSoftWithLostFirstLU(t *testing.T) {
	n := newTwoNodes(t, Soft)
	lost := 0
	n.drop = func(p wirePacket) bool {
		if p.toCN && lost == 0 {
			lost++
			return true
		}
		return false
	}
	n.now = t0.Add(10 * time.Second)
	n.mnApply(n.mn.UpdateLocal(ra(lMN2, ifLTE, router2), n.now))
	n.run(t0.Add(20 * time.Second))
	b, _ := n.cn.Binding(myNID)
	if b.RemoteLocator != lMN2 {
		t.Fatalf("CN sends to %v, want the new locator", b.RemoteLocator)
	}
	s := n.cn.Snapshot(n.now).Sessions[0]
	if len(s.RemoteLocators) != 2 || s.RemoteLocators[1].State != Valid {
		t.Fatalf("CN's view of the MN: %+v (soft: old locator still valid)", s.RemoteLocators)
	}
	if len(n.results) != 1 || n.results[0].Outcome != lu.Acked || n.results[0].Attempts != 2 ||
		n.results[0].Elapsed != time.Second+40*time.Millisecond {
		t.Fatalf("LU results = %+v, want acked on attempt 2 after 1.04 s", n.results)
	}
	// Leaving the old network: one more LU, the CN drops L_MN1.
	n.mnApply(n.mn.InterfaceDown(ifWifi, n.now))
	n.run(n.now.Add(time.Second))
	if s := n.cn.Snapshot(n.now).Sessions[0]; len(s.RemoteLocators) != 1 || s.ActiveRemote != lMN2.String() {
		t.Fatalf("CN's view after the old network left: %+v", s)
	}
	if len(n.results) != 2 || n.results[1].Outcome != lu.Acked || !n.results[1].RTTSampled || n.results[1].RTT != 40*time.Millisecond {
		t.Fatalf("second LU = %+v", n.results)
	}
}

func TestHandoffEndToEndHardAndSilentCorrespondent(t *testing.T) {
	n := newTwoNodes(t, Hard)
	n.drop = func(p wirePacket) bool { return p.toCN } // CN unreachable
	n.now = t0.Add(time.Second)
	n.mnApply(n.mn.UpdateLocal(ra(lMN2, ifLTE, router2), n.now))
	n.run(t0.Add(45 * time.Second)) // 1 s + 39 s
	if n.gaveUp != 1 {
		t.Fatalf("gave up %d times, want 1 (after 39 s)", n.gaveUp)
	}
	// The path heals; the cache's retry (30 s after the give-up) gets the LU through.
	n.drop = func(wirePacket) bool { return false }
	n.run(t0.Add(80 * time.Second)) // retry at 70 s
	b, _ := n.cn.Binding(myNID)
	if b.RemoteLocator != lMN2 {
		t.Fatalf("CN sends to %v", b.RemoteLocator)
	}
	if s := n.cn.Snapshot(n.now).Sessions[0]; len(s.RemoteLocators) != 1 {
		t.Fatalf("hard mode advertised more than the active locator: %+v", s.RemoteLocators)
	}
	if len(n.results) != 1 || n.results[0].Outcome != lu.Acked || n.results[0].Attempts != 1 {
		t.Fatalf("results = %+v, want the retry acknowledged at its first attempt", n.results)
	}
}

// An MN that moves back and forth between two networks with permanent locators (every
// advertised lifetime the same) sends LUs whose bodies repeat the set of two moves before;
// the correspondent drops a body it applied before a newer one as a replay (luguard), so
// each new LU must differ from every earlier one still remembered: no move back is lost.
func TestMovingBackIsNeverAReplay(t *testing.T) {
	mn, err := New(Config{NID: myNID, Mode: Soft, NewNonce: func() (wire.Nonce, error) { return nonce(0x3333), nil }})
	if err != nil {
		t.Fatal(err)
	}
	perm := func(loc wire.L64, ifindex int, router netip.Addr) LocalUpdate {
		return LocalUpdate{Locator: loc, IfIndex: ifindex, Router: router, ValidLifetime: Infinite, PreferredLifetime: Infinite}
	}
	now := t0
	if _, err := mn.UpdateLocal(perm(lMN1, ifWifi, router1), now); err != nil {
		t.Fatal(err)
	}
	if _, err := mn.OpenSession(Session{Local: wire.ILV{Locator: lMN1, NID: myNID}, Remote: wire.ILV{Locator: lCN, NID: cnNID}, RemoteNonce: nonce(0xcccc)}, now); err != nil {
		t.Fatal(err)
	}
	guard := luguard.New(0, 0)
	sent, sets := 0, map[string]bool{}
	check := func(eff Effects) {
		t.Helper()
		for _, m := range eff.Updates {
			sent++
			d := luguard.DigestOf(m.Update)
			if v := guard.Check(cnNID, d); v == luguard.Replay {
				t.Fatalf("LU %d %v is a replay at the correspondent", sent, m.Update.Locators)
			}
			guard.Applied(cnNID, d)
			sets[fmt.Sprint(m.Update.Locators)] = true
		}
	}
	at := []struct {
		loc    wire.L64
		ifi    int
		router netip.Addr
	}{{lMN1, ifWifi, router1}, {lMN2, ifLTE, router2}}
	for i := range 6 {
		from, to := at[i%2], at[(i+1)%2]
		now = now.Add(10 * time.Second)
		eff, err := mn.UpdateLocal(perm(to.loc, to.ifi, to.router), now)
		if err != nil {
			t.Fatal(err)
		}
		check(eff)
		now = now.Add(10 * time.Second)
		check(mn.RemoveLocal(from.loc, "link down", now))
	}
	if sent != 12 {
		t.Fatalf("%d LUs for 6 moves, want 12", sent)
	}
}
