package node_test

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"ilnp/internal/encap"
	"ilnp/internal/nstest"
	"ilnp/internal/wire"
)

// NAT keepalives end to end (issue 14): R's NAT forgets an idle UDP binding after
// natTimeout (nf_conntrack's UDP timeouts, both of them, set low); the daemons send
// keepalives after natKeepalive of silence. The MN moves to its IPv4 network behind the NAT,
// the applications fall silent for natIdle, longer than the NAT's timeout, and then:
//   - the keepalives (ICMPv6 Echo Requests "KEEP" inside UDP/IPv4, nonce and all) were on the
//     wire between the NAT and the CN all along, never further apart than the NAT's timeout;
//   - R's conntrack held the MN's binding through the whole silence, on one NAT port;
//   - the CN reaches the MN: a datagram it sends after the silence is echoed, and its session
//     is still on the same NAT endpoint.
//
// The path monitor's probes (internal/paths, issue 16: an Echo Request "ILNPpath" on every
// idle locator pair each second) would hold the binding too; R drops them before its
// conntrack sees them (a prerouting rule at priority -300 matching the inner echo data), so
// the keepalives alone hold it here. With `nat-keepalive 0s` (off) the binding then expires
// and every check fails: the CN's datagram after the silence is lost and conntrack loses the
// binding (checked by hand when this test was written).
const (
	natTimeout   = 3 // seconds
	natKeepalive = time.Second
	natIdle      = 5 * time.Second
)

func TestNATKeepaliveHoldsBinding(t *testing.T) {
	nstest.RequireTool(t, "tcpdump")
	// The CN opens the session and the MN never resolves it: neither shows the other an IPv4
	// locator before the move, so each declares the other an ilnpd (README, IPv4 networks).
	n := newCrossFamilyNetConf(t, fmt.Sprintf("ipv4-locators on\nnat-keepalive %v\npeer-dialect %s ilnpd\npeer-dialect %s ilnpd\n",
		natKeepalive, cnNIDText, mnNIDText))
	n.R.Run("sysctl", "-qw", "net.netfilter.nf_conntrack_udp_timeout="+strconv.Itoa(natTimeout),
		"net.netfilter.nf_conntrack_udp_timeout_stream="+strconv.Itoa(natTimeout))
	addr, err := resolve(n.CN, "mn")
	if err != nil {
		t.Fatal(err)
	}
	echo := &udpEcho{}
	srv := n.MN.ListenPacket("udp6", "[::]:5002")
	defer srv.Close()
	go echo.serve(srv)
	uc := n.CN.Dial("udp6", netip.AddrPortFrom(addr, 5002).String())
	defer uc.Close()
	exchange := func(seq uint64) error {
		msg := make([]byte, 64)
		binary.BigEndian.PutUint64(msg, seq)
		buf := make([]byte, 128)
		for try := 0; try < 3; try++ { // the first may go before the session's switch
			if _, err := uc.Write(msg); err != nil {
				return err
			}
			_ = uc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			for {
				k, err := uc.Read(buf)
				if err != nil {
					break
				}
				if k >= 8 && binary.BigEndian.Uint64(buf) == seq {
					return nil
				}
			}
		}
		return fmt.Errorf("datagram %d from the CN not echoed by the MN", seq)
	}
	if err := exchange(1); err != nil {
		t.Fatalf("on IPv6: %v", err)
	}
	n.waitFor(5*time.Second, "the MN's session with the CN", func() (bool, string) {
		rows, err := n.mn.sessions()
		for _, r := range rows {
			if r.PeerNID == cnNID.String() && r.RemoteNonce != "" {
				return true, ""
			}
		}
		return false, fmt.Sprint(rows, err)
	})
	if keep := os.Getenv("NK_KEEP"); keep != "" {
		t.Cleanup(func() { _ = exec.Command("cp", "-a", n.dir, keep).Run() })
	}

	// To the IPv4 network only: IPv6 goes first, then the lease.
	n.MN.Run("ip", "link", "set", "mn1", "down")
	n.MN.Run("ip", "link", "set", "mn2", "up")
	time.Sleep(200 * time.Millisecond)
	n.MN.Run("sh", "-c", "ip addr add 10.0.0.2/24 dev mn2 && ip route add default via 10.0.0.1 dev mn2")
	var nat wire.L64
	n.waitFor(5*time.Second, "the CN's session on the NAT's endpoint", func() (bool, string) {
		s := n.cn.session(t, mnNID)
		l, err := wire.ParseL64(s.ActiveRemote)
		ep, ok := encap.Endpoint(l)
		nat = l
		return err == nil && ok && ep.Addr() == natIP, fmt.Sprintf("%+v", s)
	})
	if err := exchange(2); err != nil {
		t.Fatalf("behind the NAT: %v", err)
	}
	natEP, _ := encap.Endpoint(nat)

	// The silence. Keepalive requests on the NAT's outside (either direction): UDP to or from
	// the encapsulation port whose inner packet is an Echo Request (UDP 8 + IPv6 40 + nonce
	// option 8: ICMPv6 type at udp[56]) carrying "KEEP" (after the 8-byte echo header).
	// Path probes out: UDP 8 + IPv6 40 + nonce option 8 + echo header 8 = the echo data at
	// transport offset 64 bytes (512 bits), in both directions.
	n.R.Run("nft", "add table inet probes")
	n.R.Run("nft", "add chain inet probes pre { type filter hook prerouting priority -300 ; }")
	for _, dir := range []string{"dport", "sport"} {
		n.R.Run("nft", fmt.Sprintf("add rule inet probes pre udp %s %d @th,512,64 0x%x counter drop",
			dir, encap.DefaultPort, []byte("ILNPpath")))
	}
	c := n.capture("r-cn", fmt.Sprintf("udp port %d and udp[56] == 128 and udp[64:4] == 0x4b454550", encap.DefaultPort))
	bindings := map[string]int{} // conntrack's NAT port of the MN's binding -> samples
	missing := 0
	start := time.Now()
	for time.Since(start) < natIdle {
		port, ok := natBinding(n.R.Run("cat", "/proc/net/nf_conntrack"))
		if ok {
			bindings[port]++
		} else {
			missing++
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err := exchange(3); err != nil {
		t.Errorf("after %v of silence (NAT timeout %d s): %v", natIdle, natTimeout, err)
	}
	c.Stop()
	if l, err := wire.ParseL64(n.cn.session(t, mnNID).ActiveRemote); err != nil || l != nat {
		t.Errorf("the CN's session moved from the NAT endpoint %v to %v (%v): the binding was replaced", natEP, l, err)
	}
	if missing != 0 || len(bindings) != 1 {
		t.Errorf("R's conntrack during the silence: binding missing in %d samples, NAT ports %v; want one port in every sample", missing, bindings)
	}
	for port := range bindings {
		if port != strconv.Itoa(int(natEP.Port())) {
			t.Errorf("conntrack's NAT port %s, the CN's session has %v", port, natEP)
		}
	}

	times, srcs := keepaliveTimes(t, c.File)
	var gaps []time.Duration
	for i := 1; i < len(times); i++ {
		gaps = append(gaps, times[i].Sub(times[i-1]))
	}
	t.Logf("keepalive requests on the NAT's outside during %v of silence: %d (%d from the MN through the NAT, %d from the CN), gaps %v",
		natIdle, len(times), srcs[natIP.String()], srcs[cn4.String()], gaps)
	// Interval 1 s, checked every 200 ms by each side: a request at least every 2 s, well
	// inside the NAT's 3 s.
	if len(times) < int(natIdle/(2*natKeepalive)) {
		t.Errorf("%d keepalive requests in %v, want >= %d at a %v interval", len(times), natIdle, int(natIdle/(2*natKeepalive)), natKeepalive)
	}
	for i, g := range gaps {
		if g > 2*natKeepalive {
			t.Errorf("keepalive gap %d: %v, want <= %v (interval %v)", i, g, 2*natKeepalive, natKeepalive)
		}
	}
	// Rule order: dport (the MN's probes, before the NAT), sport (the CN's, to the NAT).
	counts := strings.Fields(n.R.Run("sh", "-c", "nft list chain inet probes pre | grep -o 'packets [0-9]*' | cut -d' ' -f2"))
	t.Logf("path probes dropped at R during the test: %v (from the MN, from the CN)", counts)
}

// natBinding finds the MN's UDP binding in R's conntrack table (/proc/net/nf_conntrack: the
// original tuple from 10.0.0.2 to the CN's encapsulation port, the reply tuple to the NAT's
// port) and returns that port.
func natBinding(table string) (string, bool) {
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[2] != "udp" || !strings.Contains(line, "src=10.0.0.2 dst="+cn4.String()) {
			continue
		}
		// The second dport= is the reply direction's: the NAT's port.
		var dports []string
		for _, w := range f {
			if p, ok := strings.CutPrefix(w, "dport="); ok {
				dports = append(dports, p)
			}
		}
		if len(dports) == 2 {
			return dports[1], true
		}
	}
	return "", false
}

// keepaliveTimes reads the capture's packets: their times and how many each source address
// sent.
func keepaliveTimes(t *testing.T, file string) ([]time.Time, map[string]int) {
	t.Helper()
	out, err := exec.Command("tcpdump", "-r", file, "-n", "-tt").Output()
	if err != nil {
		t.Fatalf("tcpdump -r %s: %v", file, err)
	}
	var times []time.Time
	srcs := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line) // 1700000000.123456 IP 198.51.100.1.61000 > 198.51.100.2.49191: UDP, length N
		if len(f) < 4 || f[1] != "IP" {
			continue
		}
		sec, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			t.Fatalf("tcpdump line %q: %v", line, err)
		}
		times = append(times, time.Unix(0, int64(sec*1e9)))
		if i := strings.LastIndexByte(f[2], '.'); i > 0 {
			srcs[f[2][:i]]++
		}
	}
	return times, srcs
}
