package node_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"ilnp/internal/wire"
)

// TestLocatorUpdateReplay (issue 23 item 4): the MN moves L2 -> L3 (L3 joins, L2 goes) and the
// CN applies both LUs; the router, on the path, replays the first one (which still lists L2)
// with the session's nonce. The CN applies none of the copies and acknowledges none; the
// session stays on L3. Then the MN really moves back to L2: those LUs are new and applied, and
// L2, which left the set seconds ago, returns at full rate and is challenged again.
func TestLocatorUpdateReplay(t *testing.T) {
	n := newTestNet(t, "soft")
	if _, err := ping(n.CN, ilv(l2, mnNID), 3, 100*time.Millisecond, 2*time.Second); err != nil {
		t.Fatalf("session CN -> MN: %v", err)
	}
	seen := n.listenLUs(t, n.CN)
	var bodies []wire.LocatorUpdate
	// move sets the link and waits until the CN's session is active on active and lists
	// (want) or does not list (!want) the locator other.
	move := func(ifname, state string, active, other wire.L64, want bool) {
		t.Helper()
		n.MN.Run("ip", "link", "set", ifname, state)
		n.waitFor(15*time.Second, fmt.Sprintf("the CN's session follows %s %s", ifname, state), func() (bool, string) {
			for {
				select {
				case lu := <-seen:
					bodies = append(bodies, lu)
					continue
				default:
				}
				break
			}
			s := n.cn.session(t, mnNID)
			return s.ActiveRemote == active.String() && strings.Contains(s.RemoteLocators, other.String()) == want,
				fmt.Sprintf("%+v, %d LUs", s, len(bodies))
		})
	}
	move("mn2", "up", l3, l2, true) // soft: L3 joins and is preferred, L2 stays valid
	move("mn1", "down", l3, l2, false)
	first := -1
	for i, b := range bodies {
		if slices.ContainsFunc(b.Locators, func(e wire.LocatorEntry) bool { return e.Locator == l2 }) {
			first = i
			break
		}
	}
	if first < 0 {
		t.Fatalf("no LU listing L2 among %+v", bodies)
	}
	before := n.cn.session(t, mnNID)
	stats0, err := n.cn.stats()
	if err != nil {
		t.Fatal(err)
	}
	nonce := mustNonce(t, before.RemoteNonce)
	const each = 3
	for _, from := range []wire.L64{l2, l3} { // one of them is the LU's own source: the same bytes
		for range each {
			pkt := forgedLU(t, wire.ILV{Locator: from, NID: mnNID}, wire.ILV{Locator: l1, NID: cnNID}, bodies[first], wire.NonceOptionType, nonce)
			if err := sendRaw(n.R, pkt); err != nil {
				t.Fatal(err)
			}
		}
	}
	n.waitFor(5*time.Second, "the CN counts the replays", func() (bool, string) {
		d := statDelta(t, n.cn, stats0, "lu_replayed")
		return d == 2*each, fmt.Sprintf("lu_replayed +%d", d)
	})
	for _, c := range []string{"lu_applied", "lu_ack_sent"} {
		if d := statDelta(t, n.cn, stats0, c); d != 0 {
			t.Errorf("replayed LUs: %s +%d, want 0", c, d)
		}
	}
	if after := n.cn.session(t, mnNID); after.ActiveRemote != before.ActiveRemote || after.RemoteLocators != before.RemoteLocators {
		t.Errorf("replayed LUs changed the CN's session:\nbefore %+v\nafter  %+v", before, after)
	}
	// The genuine move back, seconds after L2 left: its LU is fresh (never applied) and comes
	// from L2 itself, so L2 returns at full rate and is challenged at once (RFC 9000 s.9.3;
	// locverify.RecentlyVerified): the CN holds back nothing for its credit.
	move("mn1", "up", l2, l3, true)
	move("mn2", "down", l2, l3, false)
	if d := statDelta(t, n.cn, stats0, "lu_applied"); d < 2 {
		t.Errorf("the move back: lu_applied +%d, want its 2 LUs", d)
	}
	if d := statDelta(t, n.cn, stats0, "lu_replayed"); d != 2*each {
		t.Errorf("the move back counted as replays: lu_replayed +%d, want only the %d replays", d, 2*each)
	}
	echoes0 := statDelta(t, n.cn, stats0, "lv_echoes")
	n.waitFor(5*time.Second, "L2 returned and answered its challenge", func() (bool, string) {
		r, e := statDelta(t, n.cn, stats0, "lv_locators_returned"), statDelta(t, n.cn, stats0, "lv_echoes")
		return r >= 1 && e >= 1, fmt.Sprintf("lv_locators_returned +%d, lv_echoes +%d (%d at the move's end)", r, e, echoes0)
	})
	for _, c := range []string{"lv_locators_unverified", "dp_egress_unverified_credit"} {
		if d := statDelta(t, n.cn, stats0, c); d != 0 {
			t.Errorf("the move back: %s +%d, want 0 (L2 came back at full rate)", c, d)
		}
	}
	if _, err := ping(n.CN, ilv(l2, mnNID), 3, 100*time.Millisecond, 3*time.Second); err != nil {
		t.Errorf("CN -> MN after the move back: %v", err)
	}
}

// TestLocatorUpdateAckBudget: every fresh LU is acknowledged however fast they come (RFC 6743
// s.3; a peer moving often must not lose its ACKs), while repeats of one body - which anyone
// who captured it can send - draw on the per-correspondent ACK budget (luguard.AckBurst).
func TestLocatorUpdateAckBudget(t *testing.T) {
	n := newTestNet(t, "soft")
	if _, err := ping(n.CN, ilv(l2, mnNID), 3, 100*time.Millisecond, 2*time.Second); err != nil {
		t.Fatalf("session CN -> MN: %v", err)
	}
	nonce := mustNonce(t, n.cn.session(t, mnNID).RemoteNonce)
	stats0, err := n.cn.stats()
	if err != nil {
		t.Fatal(err)
	}
	const fresh = 48 // beyond the burst of 32
	from, to := wire.ILV{Locator: l2, NID: mnNID}, wire.ILV{Locator: l1, NID: cnNID}
	var last wire.LocatorUpdate
	for i := range fresh {
		last = wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: []wire.LocatorEntry{{Locator: l2, Lifetime: uint16(600 - i)}}}
		if err := sendRaw(n.R, forgedLU(t, from, to, last, wire.NonceOptionType, nonce)); err != nil {
			t.Fatal(err)
		}
	}
	n.waitFor(5*time.Second, "every fresh LU applied", func() (bool, string) {
		d := statDelta(t, n.cn, stats0, "lu_applied")
		return d == fresh, fmt.Sprintf("lu_applied +%d", d)
	})
	if a, w := statDelta(t, n.cn, stats0, "lu_ack_sent"), statDelta(t, n.cn, stats0, "lu_acks_withheld"); a != fresh || w != 0 {
		t.Errorf("%d fresh LUs in a burst: lu_ack_sent +%d, lu_acks_withheld +%d; want every one acknowledged", fresh, a, w)
	}
	for range fresh {
		if err := sendRaw(n.R, forgedLU(t, from, to, last, wire.NonceOptionType, nonce)); err != nil {
			t.Fatal(err)
		}
	}
	n.waitFor(5*time.Second, "the repeats counted", func() (bool, string) {
		a, w := statDelta(t, n.cn, stats0, "lu_ack_sent"), statDelta(t, n.cn, stats0, "lu_acks_withheld")
		return a+w == 2*fresh, fmt.Sprintf("lu_ack_sent +%d, lu_acks_withheld +%d", a, w)
	})
	// The burst (32) and what refilled at 16/s while they came: well below 48 in any case.
	if w := statDelta(t, n.cn, stats0, "lu_acks_withheld"); w < fresh/4 {
		t.Errorf("%d repeats of one body: only %d ACKs withheld, want the budget to hold them back", fresh, w)
	}
}
