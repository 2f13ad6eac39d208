package daemon

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"ilnp/internal/timeline"
	"ilnp/lab/mipv6/datapath"
	"ilnp/lab/mipv6/movement"
)

// The CN of a double jump is a mobile node too: home link L4 behind its home agent, care-of
// address in L5.
var (
	peerHomePrefix = netip.MustParsePrefix("2001:db8:4::/64")
	peerForeign    = netip.MustParsePrefix("2001:db8:5::/64")
	peerHAAddr     = netip.MustParseAddr("2001:db8:4::1")
	peerHoA        = netip.MustParseAddr("2001:db8:4::214:4fff:fe20:cc01")
	peerCoA        = netip.MustParseAddr("2001:db8:5::214:4fff:fe20:cc01")
)

// The double jump with route optimisation (RFC 6275 between two mobile nodes): both leave
// their home links at the same instant; each home registration waits its own home agent's DAD
// (1 s) plus that agent's T_HA, in parallel. Then each runs return routability with the other's
// home address, which only reaches the other once the other's home agent has bound it: a
// HoTI/CoTI sent while the peer's registration is still pending is lost and retried after the
// 1-s initial timeout. With RTT 10 ms everywhere:
//
//	own registration done      = 5 + DAD + T_HA(own) + 5
//	RO done, peer bound first  = own registration + 10 (HoTI/CoTI -> HoT/CoT) + 10 (BU -> BAck)
//	RO done, peer still in DAD = own registration + 1 s (retry) + 10 + 10
func TestEngineDoubleJumpRouteOptimisation(t *testing.T) {
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	for _, c := range []struct {
		name                   string
		thaMN, thaCN           time.Duration
		mnHoTIs, cnHoTIs       int
		mnRODone, cnRODone     time.Duration // after the move
		mnHomeDone, cnHomeDone time.Duration
	}{
		// The CN's home agent is 300 ms slower: the MN's first return routability dies at it.
		{name: "CN's home agent slower", thaCN: ms(300), mnHoTIs: 2, cnHoTIs: 1,
			mnHomeDone: ms(1010), cnHomeDone: ms(1310), mnRODone: ms(1010 + 1000 + 20), cnRODone: ms(1310 + 20)},
		{name: "MN's home agent slower", thaMN: ms(300), mnHoTIs: 1, cnHoTIs: 2,
			mnHomeDone: ms(1310), cnHomeDone: ms(1010), mnRODone: ms(1310 + 20), cnRODone: ms(1010 + 1000 + 20)},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := newSimNet(t, 5*time.Millisecond)
			haCfg := haConfig(c.thaMN)
			peerHACfg := Config{Role: datapath.RoleHomeAgent, Node: "ha-cn", Interfaces: []string{"r4-r1", "r4-cn"}, Addr: peerHAAddr,
				HomePrefix: peerHomePrefix, HomeLink: "r4-cn", ProcessingDelay: c.thaCN}
			mnCfg := mnConfig(false)
			mnCfg.Correspondents, mnCfg.Correspondent = []netip.Addr{peerHoA}, true
			cnCfg := Config{Role: datapath.RoleMobileNode, Node: "cn", Interfaces: []string{"cn-r4", "cn-r5"}, HomePrefix: peerHomePrefix,
				HomeAddress: peerHoA, HomeAgent: peerHAAddr, Correspondents: []netip.Addr{hoa}, Correspondent: true}
			n.add(haCfg, haAddr)
			n.add(peerHACfg, peerHAAddr)
			mn, mnPlane := n.add(mnCfg, hoa, coa)
			cn, cnPlane := n.add(cnCfg, peerHoA, peerCoA)
			// Packets to or from (reverse-tunnelled) a home address pass its home agent, which
			// drops them until it has bound the address (ha_reverse_unknown; on the home link
			// nobody answers for it).
			bound := func(a netip.Addr) bool {
				node := map[netip.Addr]string{hoa: "ha", peerHoA: "ha-cn"}[a]
				if node == "" {
					return true
				}
				_, ok := n.first(node, KindBinding, "bind")
				return ok
			}
			n.drop = func(dst netip.Addr) bool { return !bound(dst) }
			n.dropSrc = func(src netip.Addr) bool { return !bound(src) }

			day := 24 * time.Hour
			for _, m := range []struct {
				e              *Engine
				home, away     string
				homeP, foreign netip.Prefix
			}{{mn, "mn-r2", "mn-r3", homePrefix, foreign}, {cn, "cn-r4", "cn-r5", peerHomePrefix, peerForeign}} {
				m.e.Movement(movement.Advertisement{Link: m.home, Prefixes: []movement.PrefixInfo{{Prefix: m.homeP, ValidLifetime: day}}}, n.now)
				m.e.Movement(movement.LinkState{Link: m.away, Up: true}, n.now)
				m.e.Movement(movement.Advertisement{Link: m.away, Prefixes: []movement.PrefixInfo{{Prefix: m.foreign, ValidLifetime: day}}}, n.now)
			}
			n.run(n.now.Add(time.Second))
			left := n.now
			mn.Movement(movement.LinkState{Link: "mn-r2", Up: false}, n.now)
			cn.Movement(movement.LinkState{Link: "cn-r4", Up: false}, n.now)
			n.run(left.Add(4 * time.Second))

			after := func(node string, kind timeline.Kind, detail string) time.Duration {
				ev, ok := n.first(node, kind, detail)
				if !ok {
					t.Fatalf("%s: no %s %q in %v", node, kind, detail, n.kinds(node))
				}
				return time.Duration(ev.MonoNS - n.mono(left))
			}
			count := func(node, detail string) int {
				k := 0
				for _, ev := range n.events[node] {
					if ev.Kind == timeline.RRMessage && ev.Detail == detail {
						k++
					}
				}
				return k
			}
			for _, w := range []struct {
				node       string
				home, ro   time.Duration
				hotis      int
				plane      *fakePlane
				peer, pcoa netip.Addr
			}{{"mn", c.mnHomeDone, c.mnRODone, c.mnHoTIs, mnPlane, peerHoA, peerCoA}, {"cn", c.cnHomeDone, c.cnRODone, c.cnHoTIs, cnPlane, hoa, coa}} {
				if got := after(w.node, timeline.BAckReceived, "home registration: accepted"); got != w.home {
					t.Errorf("%s: home registration done after %v, want %v", w.node, got, w.home)
				}
				if got := after(w.node, KindBinding, "route optimisation on"); got != w.ro {
					t.Errorf("%s: route optimisation done after %v, want %v", w.node, got, w.ro)
				}
				if got := count(w.node, "HoTI sent"); got != w.hotis {
					t.Errorf("%s: %d HoTIs sent, want %d", w.node, got, w.hotis)
				}
				// As the peer's correspondent it bound the peer's home address to its care-of
				// address in its own datapath.
				if !w.plane.has(fmt.Sprintf("bind %v %v", w.peer, w.pcoa)) || !w.plane.has(fmt.Sprintf("ro %v true", w.peer)) {
					t.Errorf("%s datapath: %v", w.node, w.plane.calls)
				}
			}
			for _, e := range []*Engine{mn, cn} {
				if s := e.Stats(); s.Malformed != 0 || s.SendErrors != 0 || s.PlaneErrors != 0 {
					t.Errorf("stats %+v", s)
				}
			}
		})
	}
}
