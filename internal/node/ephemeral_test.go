package node_test

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"ilnp/internal/wire"
)

const xNIDText = "0214:4fff:fe20:aa04"

var xNID = mustNID(xNIDText)

// TestEphemeralNIDs: with `nid-mode ephemeral` the MN opens sessions to two correspondents (the
// CN and a second ILNP node on X) and each sees its own NID on the wire: two NIDs that differ
// from each other and from the stable one the MN publishes. Both sessions survive the MN's
// move to L3 with those NIDs, and the stable NID never leaves the MN towards either.
func TestEphemeralNIDs(t *testing.T) {
	n := newTestNetConf(t, "soft", map[string]string{"mn": "nid-mode ephemeral\n"})
	n.X.Run("ip", "addr", "add", ilv(l4, xNID).String()+"/64", "dev", "x0", "nodad")
	x := n.startDaemon("x", n.X, xNIDText, "soft", "x0")
	n.waitFor(10*time.Second, "X static locator L4 active", func() (bool, string) {
		rows, err := x.locators()
		return err == nil && stateOf(rows, l4) == "active", fmt.Sprint(rows, err)
	})
	capCN := n.capture("r-cn", "ip6 and src net 2001:db8:2::/47")
	capX := n.capture("r-x", "ip6 and src net 2001:db8:2::/47")

	peers := map[string]netip.Addr{"cn": ilv(l1, cnNID), "x": ilv(l4, xNID)}
	for name, addr := range peers {
		if out, err := n.mn.ctl("peer", "add", name, addr.String()); err != nil {
			t.Fatalf("ilnpctl peer add %s: %v: %s", name, err, out)
		}
	}
	pingAll := func(when string) {
		t.Helper()
		for name, addr := range peers {
			if rtts, err := ping(n.MN, addr, 5, 50*time.Millisecond, 2*time.Second); err != nil || len(rtts) < 4 {
				t.Errorf("%s: MN ping %s (%s): %d of 5 replies, %v", when, name, addr, len(rtts), err)
			}
		}
	}
	pingAll("before the move")
	localNID := func(peer wire.NID) wire.NID {
		t.Helper()
		s := n.mn.session(t, peer)
		v, err := wire.ILVFromAddr(netip.MustParseAddr(s.SessionLocal))
		if err != nil {
			t.Fatalf("session with %s: local %q: %v", peer, s.SessionLocal, err)
		}
		return v.NID
	}
	eCN, eX := localNID(cnNID), localNID(xNID)
	if eCN == eX || eCN == mnNID || eX == mnNID {
		t.Fatalf("local NIDs: towards CN %v, towards X %v, stable %v: want three different", eCN, eX, mnNID)
	}
	if s := n.cn.session(t, eCN); s.PeerNID != eCN.String() {
		t.Errorf("CN's session: %+v", s)
	}
	x.session(t, eX)

	// The move: L3 comes (soft handoff), then L2 goes.
	n.MN.Run("ip", "link", "set", "mn2", "up")
	n.waitFor(10*time.Second, "MN locator L3 active", func() (bool, string) {
		rows, err := n.mn.locators()
		return err == nil && stateOf(rows, l3) == "active", fmt.Sprint(rows, err)
	})
	n.MN.Run("ip", "link", "set", "mn1", "down")
	for _, c := range []struct {
		d    *daemon
		peer wire.NID
	}{{n.cn, eCN}, {x, eX}} {
		n.waitFor(5*time.Second, c.d.name+"'s session on L3", func() (bool, string) {
			rows, err := c.d.sessions()
			for _, r := range rows {
				if r.PeerNID == c.peer.String() && r.ActiveRemote == l3.String() {
					return true, ""
				}
			}
			return false, fmt.Sprint(rows, err)
		})
	}
	pingAll("after the move")
	if got := localNID(cnNID); got != eCN {
		t.Errorf("local NID towards the CN changed in the move: %v -> %v", eCN, got)
	}
	if got := localNID(xNID); got != eX {
		t.Errorf("local NID towards X changed in the move: %v -> %v", eX, got)
	}

	for _, c := range []struct {
		name string
		cap  *capture
		want wire.NID
	}{{"CN", capCN, eCN}, {"X", capX, eX}} {
		srcs := wireSources(t, c.cap)
		perLoc := map[wire.L64]int{}
		for _, s := range srcs {
			if s.NID != c.want {
				t.Errorf("towards %s: a packet from %s, want NID %v only", c.name, s.Addr(), c.want)
			}
			perLoc[s.Locator]++
		}
		// Each ping run sends 5 echo requests; LUs come on top.
		if perLoc[l2] < 5 || perLoc[l3] < 5 {
			t.Errorf("towards %s: packets by source locator %v, want >= 5 from L2 (before the move) and from L3 (after)", c.name, perLoc)
		}
		t.Logf("towards %s: %d packets, all from NID %v, by source locator %v", c.name, len(srcs), c.want, perLoc)
	}
}

// wireSources stops the capture and returns the source of every packet in it.
func wireSources(t *testing.T, c *capture) []wire.ILV {
	t.Helper()
	c.Stop()
	out, err := exec.Command("tshark", "-r", c.File, "-T", "fields", "-e", "ipv6.src").Output()
	if err != nil {
		t.Fatalf("tshark -r %s: %v", c.File, err)
	}
	var srcs []wire.ILV
	for _, line := range strings.Fields(string(out)) {
		a, err := netip.ParseAddr(line)
		if err != nil {
			t.Fatalf("tshark source %q: %v", line, err)
		}
		v, err := wire.ILVFromAddr(a)
		if err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, v)
	}
	if len(srcs) == 0 {
		t.Fatalf("capture %s: no packets", c.File)
	}
	return srcs
}
