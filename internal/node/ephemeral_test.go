package node_test

import (
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
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
	// Immediate mode: without it libpcap hands packets over a block at a time, and the pings
	// sent in the last moments before Stop can be lost with the unfinished block.
	immediate := func(ifname string) *capture {
		return &capture{n.R.Capture(ifname, filepath.Join(n.dir, "ephemeral-"+ifname+".pcap"),
			"--immediate-mode", "-s", "256", "-Z", "root", "ip6 and src net 2001:db8:2::/47")}
	}
	capCN, capX := immediate("r-cn"), immediate("r-x")

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

// TestEphemeralNIDRetired: when the session closes (idle), its ephemeral NID is retired with its
// addresses on lo and the interface, and the next session to the same correspondent gets a new
// NID.
func TestEphemeralNIDRetired(t *testing.T) {
	n := newTestNetConf(t, "soft", map[string]string{"mn": "nid-mode ephemeral\nsession-idle-timeout 2s\n"})
	cn := ilv(l1, cnNID)
	if out, err := n.mn.ctl("peer", "add", "cn", cn.String()); err != nil {
		t.Fatalf("ilnpctl peer add: %v: %s", err, out)
	}
	session := func() (wire.NID, bool) {
		rows, err := n.mn.sessions()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.PeerNID == cnNID.String() {
				v, err := wire.ILVFromAddr(netip.MustParseAddr(r.SessionLocal))
				if err != nil {
					t.Fatal(err)
				}
				return v.NID, true
			}
		}
		return 0, false
	}
	addrsWith := func(nid wire.NID) string {
		out, _ := n.MN.Try("ip", "-6", "-o", "addr", "show")
		var hits []string
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) < 4 {
				continue
			}
			if p, err := netip.ParsePrefix(f[3]); err == nil {
				if v, err := wire.ILVFromAddr(p.Addr()); err == nil && v.NID == nid {
					hits = append(hits, f[1]+" "+f[3])
				}
			}
		}
		return strings.Join(hits, ", ")
	}
	if rtts, err := ping(n.MN, cn, 3, 50*time.Millisecond, 2*time.Second); err != nil || len(rtts) < 2 {
		t.Fatalf("first ping: %d replies, %v", len(rtts), err)
	}
	first, ok := session()
	if !ok || first == mnNID {
		t.Fatalf("first session: local NID %v (ok %v), want an ephemeral one", first, ok)
	}
	if got := addrsWith(first); !strings.Contains(got, "lo ") || !strings.Contains(got, "mn1 ") {
		t.Fatalf("addresses with %v: %q, want one on lo and one on mn1", first, got)
	}
	n.waitFor(15*time.Second, "the idle session closed and its NID's addresses gone", func() (bool, string) {
		_, open := session()
		got := addrsWith(first)
		return !open && got == "", fmt.Sprintf("session open %v, addresses %q", open, got)
	})
	if rtts, err := ping(n.MN, cn, 3, 50*time.Millisecond, 2*time.Second); err != nil || len(rtts) < 2 {
		t.Fatalf("second ping: %d replies, %v", len(rtts), err)
	}
	second, ok := session()
	if !ok || second == first || second == mnNID {
		t.Fatalf("second session: local NID %v (ok %v), want a new ephemeral one (first %v, stable %v)", second, ok, first, mnNID)
	}
	st, err := n.mn.stats()
	if err != nil {
		t.Fatal(err)
	}
	if st["ephemeral_nids_retired"] < 1 || st["ephemeral_nids_drawn"] < 2 {
		t.Errorf("MN: %d ephemeral NIDs drawn, %d retired; want >= 2 and >= 1", st["ephemeral_nids_drawn"], st["ephemeral_nids_retired"])
	}
}
