package datapath

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"ilnp/internal/nstest"
	"ilnp/internal/wire"
)

// TestNetnsLocatorFlip: a TCP stream and a UDP echo exchange opened on the session view keep
// working while the test flips B's active locator between its two interfaces by map updates
// only, then takes B's first interface down (hard handoff; B's identity address lives on lo). Captures on the router show the nonce and the new locator; every captured checksum
// verifies (tshark for what it can judge, Go for ILNP TCP/UDP whose wire checksum counts the
// locators as zero, RFC 6744 s.3, which tshark does not know).
//
// It runs with each workaround for the router GSO bug (platform.md): TSO and TX checksum offload
// off on the hosts (captured checksums are then final and get checked), and TSO/GSO on with the
// router's links at MTU 1600 (flows only: captured checksums are unfinished CHECKSUM_PARTIAL
// ones). A UDP GSO sender (UDP_SEGMENT) checks that ILNP works with GSO super-packets.
func TestNetnsLocatorFlip(t *testing.T) {
	nstest.RequireTool(t, "tcpdump", "tshark", "ethtool")
	t.Run("tso-off", func(t *testing.T) { testLocatorFlip(t, true, false) })
	t.Run("tso-on-router-mtu-1600", func(t *testing.T) { testLocatorFlip(t, false, false) })
	// With draft-bhatti checksums tshark can judge every packet, ILNP TCP/UDP included.
	t.Run("tso-off-ipv6-checksums", func(t *testing.T) { testLocatorFlip(t, true, true) })
}

func testLocatorFlip(t *testing.T, hostTSOOff, ipv6Checksums bool) {
	tp := newTopo(t, topoOptions{hostTSOOff: hostTSOOff, datapath: Options{IPv6Checksums: ipv6Checksums}})
	dir := t.TempDir()
	caps := map[string]string{"r1": filepath.Join(dir, "r1.pcap"), "r2": filepath.Join(dir, "r2.pcap")}
	if !hostTSOOff {
		caps = nil
	}
	var dumps []*nstest.Capture
	for dev, file := range caps {
		dumps = append(dumps, tp.r.Capture(dev, file, "ip6"))
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// TCP: A streams a known pattern to B at about 2 MB/s; B checks every byte.
	ln := tp.b.Listen("tcp6", "[::]:5001")
	defer ln.Close()
	var tcpBytes atomic.Int64
	tcpErr := make(chan error, 2)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			tcpErr <- err
			return
		}
		defer c.Close()
		if err := nstest.ReadPattern(ctx, c, &tcpBytes); err != nil {
			tcpErr <- err
		}
	}()
	client := tp.a.Dial("tcp6", netip.AddrPortFrom(tp.viewB, 5001).String())
	defer client.Close()
	go func() {
		if err := nstest.WritePattern(ctx, client, 16<<10, 8*time.Millisecond); err != nil {
			tcpErr <- err
		}
	}()

	// UDP: A sends numbered datagrams every 2 ms; B echoes them. The server binds the
	// session-view address: an unbound one would answer from whatever source address the
	// kernel picks for the reply (B has several), which the client's connected socket refuses.
	srv := tp.b.ListenPacket("udp6", netip.AddrPortFrom(tp.viewB, 5002).String())
	defer srv.Close()
	go nstest.EchoUDP(srv)
	uc := tp.a.Dial("udp6", netip.AddrPortFrom(tp.viewB, 5002).String())
	defer uc.Close()
	var udpSent, udpEchoed atomic.Int64
	go func() {
		msg := make([]byte, 200)
		for ctx.Err() == nil {
			binary.BigEndian.PutUint64(msg, uint64(udpSent.Add(1)))
			_, _ = uc.Write(msg)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, err := uc.Read(buf); err != nil {
				return
			}
			udpEchoed.Add(1)
		}
	}()

	// Plain IPv6 beside ILNP (dual stack): UDP to an address of B that is no ILNP peer.
	plainSrv := tp.b.ListenPacket("udp6", netip.AddrPortFrom(tp.plainB, 5003).String())
	defer plainSrv.Close()
	var plainGot atomic.Int64
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := plainSrv.ReadFrom(buf); err != nil {
				return
			}
			plainGot.Add(1)
		}
	}()
	plainC := tp.a.Dial("udp6", netip.AddrPortFrom(tp.plainB, 5003).String())
	defer plainC.Close()
	// ICMPv6 echo over ILNP (its checksum keeps the ordinary pseudo-header, which tshark
	// can judge): requests from a raw socket, replies from B's kernel.
	var icmpSock net.PacketConn
	must(t, tp.a.Do(func() error {
		var err error
		icmpSock, err = net.ListenPacket("ip6:ipv6-icmp", "::")
		return err
	}))
	defer icmpSock.Close()
	var echoReplies atomic.Int64
	lus := make(chan receivedLU, 16)
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := icmpSock.ReadFrom(buf)
			if err != nil {
				return
			}
			switch {
			case n > 0 && buf[0] == 129:
				echoReplies.Add(1)
			case n > 0 && buf[0] == wire.ICMPv6TypeLocatorUpdate:
				src, _ := netip.AddrFromSlice(from.(*net.IPAddr).IP)
				select {
				case lus <- receivedLU{src, append([]byte(nil), buf[:n]...)}:
				default:
				}
			}
		}
	}()
	go func() {
		echo := []byte{128, 0, 0, 0, 0x42, 0x42, 0, 0, 'i', 'l', 'n', 'p'}
		dst := &net.IPAddr{IP: tp.viewB.AsSlice()}
		for seq := 0; ctx.Err() == nil; seq++ {
			binary.BigEndian.PutUint16(echo[6:], uint16(seq))
			_, _ = icmpSock.WriteTo(echo, dst)
			_, _ = plainC.Write([]byte("plain ipv6"))
			time.Sleep(20 * time.Millisecond)
		}
	}()

	// UDP with GSO: 8 datagrams of 1000 bytes per send, segmented after the tc hook. The
	// kernel refuses UDP GSO without TX checksum offload (EIO), so only with TSO on.
	gsoSrv := tp.b.ListenPacket("udp6", netip.AddrPortFrom(tp.viewB, 5004).String())
	defer gsoSrv.Close()
	var gsoGot, gsoBad atomic.Int64
	go func() {
		buf := make([]byte, 9000)
		for {
			n, _, err := gsoSrv.ReadFrom(buf)
			if err != nil {
				return
			}
			if n != 1000 || buf[0] != 0x5a || buf[999] != 0xa5 {
				gsoBad.Add(1)
			}
			gsoGot.Add(1)
		}
	}()
	gsoC := tp.a.Dial("udp6", netip.AddrPortFrom(tp.viewB, 5004).String())
	defer gsoC.Close()
	raw, err := gsoC.(*net.UDPConn).SyscallConn()
	must(t, err)
	var sockErr error
	must(t, raw.Control(func(fd uintptr) { sockErr = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT, 1000) }))
	must(t, sockErr)
	var gsoSent atomic.Int64
	wantGSO := int64(80)
	if hostTSOOff {
		wantGSO = -1
	}
	go func() {
		if hostTSOOff {
			return
		}
		buf := make([]byte, 8000)
		for i := 0; i < len(buf); i += 1000 {
			buf[i], buf[i+999] = 0x5a, 0xa5
		}
		for ctx.Err() == nil {
			if _, err := gsoC.Write(buf); err == nil {
				gsoSent.Add(8)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	progress := func(phase string) {
		t.Helper()
		tcp0, udp0, gso0 := tcpBytes.Load(), udpEchoed.Load(), gsoGot.Load()
		defer func() {
			if t.Failed() {
				t.Logf("%s: TCP %d bytes, UDP %d sent / %d echoed", phase, tcpBytes.Load(), udpSent.Load(), udpEchoed.Load())
			}
		}()
		waitFor(t, 5*time.Second, func() bool {
			select {
			case err := <-tcpErr:
				t.Fatalf("%s: %v", phase, err)
			default:
			}
			return tcpBytes.Load() > tcp0+1<<20 && udpEchoed.Load() > udp0+100 && gsoGot.Load() > gso0+wantGSO
		}, phase+": TCP and UDP progress")
		t.Logf("%s: TCP %d bytes, UDP %d sent / %d echoed", phase, tcpBytes.Load(), udpSent.Load(), udpEchoed.Load())
	}
	progress("locator 1")
	for i, l := range []wire.L64{lB2, lB1, lB2} {
		tp.flip(t, l)
		progress(fmt.Sprintf("flip %d to %v", i+1, l))
		if i == 0 {
			sendLocatorUpdate(t, tp, lus)
		}
	}
	// Hard handoff: b1 goes away (the kernel deletes its addresses; the identity lives on lo).
	tp.b.Run("ip", "link", "set", "b1", "down")
	must(t, tp.db.PutLocalLocator(LocalLocator{Locator: lB1, State: LocatorExpired}))
	if _, err := tp.da.SetRemoteLocators(nidB, []RemoteLocator{{Locator: lB2, State: LocatorActive}}, lB2); err != nil {
		t.Fatal(err)
	}
	progress("b1 down")
	cancel()
	client.Close()
	uc.Close()
	time.Sleep(200 * time.Millisecond)
	for _, c := range dumps {
		c.Stop()
	}

	if plainGot.Load() == 0 || echoReplies.Load() == 0 {
		t.Fatalf("plain IPv6 datagrams %d, ILNP echo replies %d", plainGot.Load(), echoReplies.Load())
	}
	t.Logf("UDP lost %d of %d; UDP GSO %d of %d received (%d wrong); plain IPv6 datagrams %d; ICMPv6 echo replies %d",
		udpSent.Load()-udpEchoed.Load(), udpSent.Load(), gsoGot.Load(), gsoSent.Load(), gsoBad.Load(), plainGot.Load(), echoReplies.Load())
	if gsoBad.Load() != 0 {
		t.Fatalf("%d UDP GSO datagrams arrived wrong", gsoBad.Load())
	}

	sa, err := tp.da.GetSession(nidA, nidB)
	must(t, err)
	sb, err := tp.db.GetSession(nidB, nidA)
	must(t, err)
	if sa.LocalNonce != sb.RemoteNonce || sb.LocalNonce != sa.RemoteNonce || sa.LocalNonce == sa.RemoteNonce {
		t.Fatalf("nonces: A sends %v expects %v, B sends %v expects %v", sa.LocalNonce, sa.RemoteNonce, sb.LocalNonce, sb.RemoteNonce)
	}
	for name, d := range map[string]*Datapath{"A": tp.da, "B": tp.db} {
		c, err := d.Counters()
		must(t, err)
		for _, bad := range []string{"ingress_bad_nonce", "ingress_unknown_locator", "ingress_invalid_local_locator", "ingress_malformed", "egress_errors", "ingress_errors"} {
			if c[bad] != 0 {
				t.Errorf("host %s: %s = %d", name, bad, c[bad])
			}
		}
		t.Logf("host %s counters: egress_ilnp=%d redirected=%d ingress_ilnp=%d", name, c["egress_ilnp"], c["egress_redirected"], c["ingress_ilnp"])
	}

	if caps == nil {
		return
	}
	// The new locator with the nonce, in both directions, on the router's second link.
	newB := addr(lB2, nidB).String()
	for _, filter := range []string{"ipv6.opt.ilnp_nonce && ipv6.dst == " + newB, "ipv6.opt.ilnp_nonce && ipv6.src == " + newB} {
		out, err := exec.Command("tshark", "-r", caps["r2"], "-Y", filter, "-T", "fields", "-e", "frame.number").Output()
		if err != nil {
			t.Fatalf("tshark: %v", err)
		}
		if n := len(strings.Fields(string(out))); n < 100 {
			t.Fatalf("%q: %d packets on the second link", filter, n)
		}
	}
	for dev, file := range caps {
		checkCapture(t, dev, file, ipv6Checksums)
	}
}

type receivedLU struct {
	src netip.Addr
	msg []byte
}

// sendLocatorUpdate does what B's daemon does after a move: it writes an LU from a raw ICMPv6
// socket to A's session-view address; B's egress adds the nonce and sends it from the new
// locator. A's ingress verifies and strips the nonce and hands the LU, wire addresses intact, to
// A's raw socket (the kernel checks the ICMPv6 checksum on the way).
func sendLocatorUpdate(t *testing.T, tp *topo, lus <-chan receivedLU) {
	t.Helper()
	lu := wire.LocatorUpdate{Op: wire.OpAdvertisement, Locators: []wire.LocatorEntry{
		{Locator: lB2, Preference: 1, Lifetime: 60}, {Locator: lB1, Preference: 2, Lifetime: 60}}}
	msg, err := lu.Marshal(tp.viewB, tp.viewA)
	must(t, err)
	var sock net.PacketConn
	must(t, tp.b.Do(func() error {
		var err error
		sock, err = net.ListenPacket("ip6:ipv6-icmp", tp.viewB.String())
		return err
	}))
	defer sock.Close()
	// Retransmitted like the daemon does: a packet can be lost like any other.
	var r receivedLU
	for attempt := 1; ; attempt++ {
		if _, err := sock.WriteTo(msg, &net.IPAddr{IP: tp.viewA.AsSlice()}); err != nil {
			t.Fatalf("send LU: %v", err)
		}
		select {
		case r = <-lus:
		case <-time.After(500 * time.Millisecond):
			if attempt < 4 {
				continue
			}
			ca, _ := tp.da.Counters()
			cb, _ := tp.db.Counters()
			t.Fatalf("the Locator Update did not reach A's raw socket\nA %v\nB %v", ca, cb)
		}
		t.Logf("LU from %v delivered to A's raw socket after %d attempt(s)", r.src, attempt)
		break
	}
	{
		if want := addr(lB2, nidB); r.src != want {
			t.Fatalf("LU arrived from %v, want the new locator %v", r.src, want)
		}
		got, err := wire.ParseLocatorUpdate(r.msg, r.src, tp.viewA, wire.LUParseOptions{})
		if err != nil || len(got.Locators) != 2 || got.Locators[0].Locator != lB2 {
			t.Fatalf("LU as received: %+v, %v", got, err)
		}
	}
	if c := counter(t, tp.da, "ingress_locator_updates"); c == 0 {
		t.Fatalf("A ingress_locator_updates = %d", c)
	}
}

// checkCapture verifies every checksum in a capture, twice: tshark (validation on) for the
// packets whose checksum it can judge (all of them with IPv6 checksums; otherwise ICMPv6 and
// plain IPv6, since tshark does not know the locators-as-zero rule of ILNP TCP/UDP), and Go for
// every TCP/UDP/ICMPv6 packet under the rule in force.
func checkCapture(t *testing.T, dev, file string, ipv6Checksums bool) {
	t.Helper()
	out, err := exec.Command("tshark", "-r", file, "-o", "tcp.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE",
		"-T", "fields", "-E", "separator=,", "-e", "ipv6.opt.ilnp_nonce", "-e", "tcp.checksum.status", "-e", "udp.checksum.status",
		"-e", "icmpv6.checksum.status").Output()
	if err != nil {
		t.Fatalf("tshark %s: %v", file, err)
	}
	tsharkBad, tsharkJudged := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, ",")
		if len(f) != 4 {
			continue
		}
		judge := f[1:]
		if f[0] != "" && !ipv6Checksums {
			judge = f[3:] // ILNP: only ICMPv6 uses the ordinary pseudo-header
		}
		for _, s := range judge {
			if s == "" || s == "2" {
				continue
			}
			tsharkJudged++
			if s == "0" {
				tsharkBad++
			}
		}
	}
	frames := readPcap(t, file)
	goBad, ilnp := 0, 0
	for _, f := range frames {
		if len(f) < 14 || binary.BigEndian.Uint16(f[12:]) != 0x86dd {
			continue
		}
		p, err := wire.ParsePacket(f[14:])
		if err != nil {
			t.Errorf("%s: unparsable packet: %v", dev, err)
			continue
		}
		if p.Proto != wire.ProtoTCP && p.Proto != wire.ProtoUDP && p.Proto != wire.ProtoICMPv6 {
			continue
		}
		src, dst := p.IPv6.Src, p.IPv6.Dst
		if _, ok := p.Nonce(); ok {
			ilnp++
			if p.Proto != wire.ProtoICMPv6 && !ipv6Checksums {
				src, dst = zeroLocator(src), zeroLocator(dst)
			}
		}
		if wire.PseudoHeaderChecksum(src, dst, p.Proto, p.UpperLayer(f[14:])) != 0 {
			goBad++
		}
	}
	t.Logf("%s: %d frames, %d ILNP; bad checksums: Go %d, tshark %d of %d judged", dev, len(frames), ilnp, goBad, tsharkBad, tsharkJudged)
	if goBad != 0 || tsharkBad != 0 {
		t.Errorf("%s: corrupt checksums (Go %d, tshark %d)", dev, goBad, tsharkBad)
	}
	if ilnp == 0 {
		t.Errorf("%s: no ILNP packet captured", dev)
	}
}

// readPcap reads the frames of a classic pcap file as tcpdump -w writes it.
func readPcap(t testing.TB, file string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 24 || binary.LittleEndian.Uint32(b) != 0xa1b2c3d4 {
		t.Fatalf("%s: not a little-endian microsecond pcap", file)
	}
	var frames [][]byte
	for off := 24; off+16 <= len(b); {
		n := int(binary.LittleEndian.Uint32(b[off+8:]))
		orig := int(binary.LittleEndian.Uint32(b[off+12:]))
		off += 16
		if off+n > len(b) {
			break // cut short by the interrupt
		}
		if n == orig {
			frames = append(frames, b[off:off+n])
		}
		off += n
	}
	return frames
}

func waitFor(t testing.TB, timeout time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
